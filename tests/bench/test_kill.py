"""kill -9 in the middle of a sweep loses nothing that had finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servekit.bench.store import read_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SCRIPT = Path(__file__).with_name("scripted_server.py")


def test_kill_9_mid_sweep_keeps_every_finished_request(
    tmp_path: Path, start_script: Callable[..., Any], records_waiter: Callable[[Path, int], None]
) -> None:
    """Every line of records.jsonl parses and every request the server finished is there.

    The scripted server logs when it wrote each answer's last chunk. The test freezes the
    server (SIGSTOP), gives the client a second to take in what was sent, then kills the
    client with SIGKILL: every answer finished before the freeze must be a record.
    """
    truth = tmp_path / "truth.jsonl"
    server = start_script(str(SCRIPT), str(truth))
    url = server.url
    out = tmp_path / "run"
    bench = subprocess.Popen(
        [sys.executable, "-m", "servekit", "bench", "--url", url, "--concurrency", "8",
         "--requests-per-point", "400", "--warmup", "0", "--input-len", "8",
         "--output-len", "128", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        records_file = out / "records.jsonl"
        records_waiter(records_file, 24)
        server_pid = server.pid
        frozen_at = time.monotonic_ns()
        os.kill(server_pid, signal.SIGSTOP)
        time.sleep(1.0)
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait(timeout=10)
        os.kill(server_pid, signal.SIGCONT)
    finally:
        bench.kill()
    # the first answer was bench's token-ids probe (one request before the sweep, no record)
    finished = [
        row for line in truth.read_text(encoding="utf-8").splitlines()[1:]
        if (row := json.loads(line))["sent_ns"][-1] < frozen_at
    ]  # fmt: skip
    records = read_records(out)  # raises if any line does not parse
    assert len(finished) >= 24
    assert sum(1 for r in records if r.ok) >= len(finished)
