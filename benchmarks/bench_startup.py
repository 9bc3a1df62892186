"""Benchmark: wall-clock start-up of every command's --help and the cheap commands (not a test).

Runs the venv's `servekit` console script (this checkout's sources first on the path) ten
times per command line, whole process, and prints the median and the spread. Issue #29 asks
for every `--help` and `servekit profiles list` under 150 ms (median of 10 runs). The command
lines come from the CLI's own command table, subcommands included, so a new command is
measured without editing this file.

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
sys.path.insert(0, str(SRC))

from servekit.cli.main import command_paths  # noqa: E402  (the checkout's sources)

SERVEKIT = Path(sys.executable).parent / "servekit"
CHEAP = [
    ["profiles", "list"],
    ["profiles", "list", "--json"],
    ["render", "minimax-m3-mxfp8-8xa800", "--target", "vllm"],
]
RUNS = 10
BOUND_MS = 150.0


def wall_ms(args: list[str], env: dict[str, str]) -> float:
    """Wall time of one `servekit ARGS` process in milliseconds (it must succeed)."""
    start = time.perf_counter()
    subprocess.run([str(SERVEKIT), *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    """Print one line per command line: the median and the spread of ten runs."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    wall_ms(["--help"], env)  # warm the file cache and the bytecode
    print(f"load average: {os.getloadavg()[0]:.2f}")
    lines = [["--help"]] + [[*path, "--help"] for path in command_paths()] + CHEAP
    over = []
    for args in lines:
        runs = sorted(wall_ms(args, env) for _ in range(RUNS))
        median = statistics.median(runs)
        if median >= BOUND_MS:
            over.append(" ".join(args))
        print(
            f"servekit {' '.join(args)}: median {median:.0f} ms "
            f"(min {runs[0]:.0f}, max {runs[-1]:.0f}, {RUNS} runs)"
        )
    print(f"at or over {BOUND_MS:.0f} ms: {', '.join(over) if over else 'none'}")


if __name__ == "__main__":
    main()
