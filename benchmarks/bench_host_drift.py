"""Benchmark: how much this machine's own single-core speed moves over minutes (not a test).

The engine tier's timing (issue #19's verification on vLLM CPU) compares a prediction from
points measured on one engine start with a measurement on another start minutes later. This
measures the floor under that comparison: the same fixed work (a 512 x 512 float32 matrix
product 200 times, single-threaded BLAS, pinned to one core, nothing else of ours running)
timed every few seconds for a few minutes. Prints each sample and the spread: min, median,
max, max/min and the coefficient of variation.

Run: .venv/bin/python benchmarks/bench_host_drift.py [--core 1] [--samples 60] [--gap-s 2]
"""

from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"  # before numpy loads its BLAS

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

REPEATS = 200


def _sample(a: np.ndarray, b: np.ndarray) -> float:
    start = time.perf_counter()
    for _ in range(REPEATS):
        a @ b
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--gap-s", type=float, default=2.0)
    args = parser.parse_args()
    if args.samples < 2:
        parser.error(
            f"--samples {args.samples}: the spread needs at least 2; give --samples 2 or more"
        )
    if not 0 <= args.gap_s < float("inf"):
        parser.error(f"--gap-s {args.gap_s}: give a finite number of seconds, 0 or more")
    if args.core not in os.sched_getaffinity(0):
        parser.error(f"--core {args.core} is not one this process may run on; "
                     f"give one of {sorted(os.sched_getaffinity(0))}")  # fmt: skip
    os.sched_setaffinity(0, {args.core})
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512), dtype=np.float32)
    b = rng.standard_normal((512, 512), dtype=np.float32)
    _sample(a, b)  # warm the caches and BLAS
    times = []
    began = time.monotonic()
    for _ in range(args.samples):
        times.append(_sample(a, b))
        time.sleep(args.gap_s)
    elapsed = time.monotonic() - began
    print("samples (s):", " ".join(f"{t:.3f}" for t in times))
    low, mid, high = min(times), statistics.median(times), max(times)
    cv = statistics.stdev(times) / statistics.mean(times)
    spread = f"min {low:.3f} s, median {mid:.3f} s, max {high:.3f} s"
    print(f"core {args.core}, {len(times)} samples over {elapsed:.0f} s: {spread}, "
          f"max/min {high / low:.2f}, CV {cv:.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
