"""Benchmark: `logs analyze` on a long engine log, and `servekit doctor` end to end (not a test).

A 427B engine that served for a day writes a log of hundreds of thousands of lines (one
stats line every 10 s per engine, one access line per request). The benchmark repeats the
reference MiniMax-M3 crash log's serving part to N lines and times `analyze_log` (figures,
failures and the knowledge-base match), then times `servekit doctor` as a process.

Run: .venv/bin/python benchmarks/bench_logs.py [LINES]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from servekit.doctor.log_analysis import analyze_log

ROOT = Path(__file__).resolve().parents[1]
CRASH = ROOT / "tests" / "doctor" / "data" / "m3_v0251_illegal_memory_access.log"


def _long_log(lines: int) -> str:
    """The crash log with its request and stats lines repeated to about `lines` lines."""
    text = CRASH.read_text()
    head, _, tail = text.partition("INFO:     Application startup complete.\n")
    serving = [line for line in tail.splitlines() if "POST" in line or "Engine 000" in line]
    body = "\n".join(serving[i % len(serving)] for i in range(lines)) + "\n"
    return head + "INFO:     Application startup complete.\n" + body + tail


def main() -> None:
    """Time analyze_log at the given size and the doctor command."""
    lines = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    text = _long_log(lines)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        analysis = analyze_log(text)
        times.append(time.perf_counter() - start)
    count = text.count("\n")
    best = min(times)
    ids = [hit.issue.id for hit in analysis.issues]
    print(f"analyze_log: {count:,} lines, {len(text) / 2**20:.1f} MiB: best of 3 {best:.2f} s "
          f"({count / best:,.0f} lines/s); issues {ids}")  # fmt: skip
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "servekit", "doctor", "minimax-m3-mxfp8-8xa800",
                    "--json"], capture_output=True, check=False)  # fmt: skip
    print(f"servekit doctor minimax-m3-mxfp8-8xa800 --json: {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
