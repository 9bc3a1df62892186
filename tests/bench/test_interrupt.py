"""Ctrl-C in the middle of a sweep writes the summary of what finished."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servekit.bench.store import read_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_ctrl_c_keeps_records_and_summary(
    tmp_path: Path,
    start_server: Callable[..., tuple[subprocess.Popen[bytes], str]],
    records_waiter: Callable[[Path, int], None],
) -> None:
    """SIGINT mid-sweep: exit 130, every record parses, summary.json covers them."""
    _, url = start_server()
    out = tmp_path / "run"
    bench = subprocess.Popen(
        [sys.executable, "-m", "servekit", "bench", "--url", url, "--concurrency", "4,8",
         "--requests-per-point", "300", "--warmup", "0", "--input-len", "32",
         "--output-len", "32", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    records_file = out / "records.jsonl"
    records_waiter(records_file, 20)
    bench.send_signal(signal.SIGINT)
    _, err = bench.communicate(timeout=30)
    assert bench.returncode == 130, err.decode()
    assert b"interrupted" in err
    records = read_records(out)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    point = summary["points"][0]
    assert point["completed"] + point["failed"] == len(records) > 0
    assert point["client"]["valid"] is False
