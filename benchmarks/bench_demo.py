"""Benchmark: wall time of `servekit demo --quick` and `servekit demo` (not a test).

Issue #7 bounds them at 60 s and 5 minutes on this 2-core machine. Each runs as its own
process into a temporary directory; the script prints the time and the recommendation.

Run: .venv/bin/python benchmarks/bench_demo.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time


def main() -> None:
    """Time both demo sizes."""
    for args in (["--quick"], []):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "servekit", "demo", *args, "--out", tmp, "--json"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            seconds = time.monotonic() - start
        if done.returncode != 0:
            print(f"demo {' '.join(args)} failed ({done.returncode}): {done.stderr[-500:]}")
            continue
        result = json.loads(done.stdout)
        print(f"demo {' '.join(args) or '(full)'}: {seconds:.1f} s; {result['recommendation']}")
        for line in result["table"]:
            print(f"  {line}")


if __name__ == "__main__":
    main()
