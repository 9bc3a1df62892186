"""Benchmark: wall-clock start-up of the cheap commands, whole process (not a test).

Runs the venv's `servekit` console script (this checkout's sources first on the path) five
times per command and prints the median. Issue #13 asks for under 150 ms each.

Run: .venv/bin/python benchmarks/bench_startup.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
SERVEKIT = Path(sys.executable).parent / "servekit"
COMMANDS = [
    ["--help"],
    ["profiles", "list"],
    ["render", "minimax-m3-mxfp8-8xa800", "--target", "vllm"],
]
RUNS = 5


def wall_ms(args: list[str], env: dict[str, str]) -> float:
    """Wall time of one `servekit ARGS` process in milliseconds (it must succeed)."""
    start = time.perf_counter()
    subprocess.run([str(SERVEKIT), *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    """Print one line per command: the median and the spread of five runs."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    wall_ms(["--help"], env)  # warm the file cache and the bytecode
    print(f"load average: {os.getloadavg()[0]:.2f}")
    for args in COMMANDS:
        runs = sorted(wall_ms(args, env) for _ in range(RUNS))
        print(
            f"servekit {' '.join(args)}: median {statistics.median(runs):.0f} ms "
            f"(min {runs[0]:.0f}, max {runs[-1]:.0f}, {RUNS} runs)"
        )


if __name__ == "__main__":
    main()
