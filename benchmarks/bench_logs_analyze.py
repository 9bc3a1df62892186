"""Benchmark: peak memory and time of `servekit logs analyze` on a 1 GB log (not a test).

The log is the reference MiniMax-M3 crash log with its request and stats lines repeated
to the size asked for (its startup figures and the crash stay at the ends). Each run is
a fresh `python -m servekit logs analyze FILE --json` process; its peak RSS is the
child's `ru_maxrss`, against the same command on the small original log.

Run: .venv/bin/python benchmarks/bench_logs_analyze.py [MiB] [DIR]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CRASH = ROOT / "tests" / "doctor" / "data" / "m3_v0251_illegal_memory_access.log"
MARK = "INFO:     Application startup complete.\n"


def write_long_log(path: Path, size_bytes: int) -> Path:
    """Write the crash log with its serving lines repeated to about `size_bytes`."""
    text = CRASH.read_text(encoding="utf-8")
    head, _, tail = text.partition(MARK)
    serving = [line for line in tail.splitlines() if "POST" in line or "Engine 000" in line]
    block = "\n".join(serving * max(1, (1 << 20) // sum(len(s) + 1 for s in serving))) + "\n"
    data = block.encode("utf-8")
    with path.open("wb") as file:
        file.write((head + MARK).encode("utf-8"))
        written = 0
        while written < size_bytes:
            file.write(data)
            written += len(data)
        file.write(tail.encode("utf-8"))
    return path


def peak_rss_mib(log: Path) -> tuple[float, float]:
    """Peak RSS (MiB) and wall time (s) of one `logs analyze --json` process on `log`."""
    code = (
        "import resource, sys\n"
        "from servekit.cli.main import cli\n"
        "try:\n"
        "    cli(['logs', 'analyze', sys.argv[1], '--json'], prog_name='servekit')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, str(log)], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    return int(done.stderr.strip().splitlines()[-1]) / 1024, seconds


def main() -> None:
    """Measure the small log, then a generated log of the given size (default 1024 MiB)."""
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    where = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.gettempdir())
    small, small_s = peak_rss_mib(CRASH)
    print(f"small log ({CRASH.stat().st_size / 1024:.0f} KiB): peak RSS {small:.0f} MiB, "
          f"{small_s:.1f} s")  # fmt: skip
    log = write_long_log(where / "servekit-bench-long.log", mib << 20)
    try:
        size = log.stat().st_size / 2**20
        big, big_s = peak_rss_mib(log)
        print(f"{size:,.0f} MiB log: peak RSS {big:.0f} MiB (+{big - small:.0f} MiB over the "
              f"small log), {big_s:.1f} s ({size / big_s:.0f} MiB/s)")  # fmt: skip
    finally:
        os.unlink(log)


if __name__ == "__main__":
    main()
