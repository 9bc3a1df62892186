"""kill -9 in the middle of a sweep loses nothing that had finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servekit.bench.store import read_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def finished_by_server(url: str) -> int:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()  # noqa: S310
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:request_success":
            total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return int(total)


def test_kill_9_mid_sweep_keeps_every_finished_request(
    tmp_path: Path, start_server: Callable[..., tuple[subprocess.Popen[bytes], str]]
) -> None:
    """Every line of records.jsonl parses and every request the server finished is there."""
    proc, url = start_server()
    out = tmp_path / "run"
    bench = subprocess.Popen(
        [sys.executable, "-m", "servekit", "bench", "--url", url, "--concurrency", "8",
         "--requests-per-point", "400", "--warmup", "0", "--input-len", "32",
         "--output-len", "32", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        records_file = out / "records.jsonl"
        for _ in range(600):  # wait until the sweep is well under way
            if records_file.is_file() and records_file.read_bytes().count(b"\n") >= 40:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGSTOP)  # freeze the server: nothing more finishes
        time.sleep(1.0)  # let the bytes already sent reach the client and be recorded
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait(timeout=10)
        os.kill(proc.pid, signal.SIGCONT)
        finished = finished_by_server(url)
    finally:
        bench.kill()
    records = read_records(out)  # raises if any line does not parse
    assert 40 <= len(records) < 400
    assert sum(1 for r in records if r.ok) >= finished
