"""Measure the CPU host the engine tier's vLLM CPU runs on: one core's memory bandwidth and
float32 matmul rate, the two figures the simulator's roofline needs for that core.

Run pinned to the server's core with one BLAS / OpenMP thread, as vLLM runs there:
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 taskset -c 1 .venv/bin/python \
      benchmarks/measure_cpu_host.py [--repeats N] [--json]

- memory bandwidth: `np.copyto` of a 256 MiB float32 array (larger than the L3 of the hosts
  measured so far), counted as read + write bytes, and `np.add.reduce` of it (read only,
  what a step's weight and KV reads are), best of N;
- float32 matmul: torch.mm (oneDNN/MKL, the library vLLM CPU's linear layers call) and
  numpy.matmul (OpenBLAS) of 1024 x 1024 by 1024 x 1024, 2 n^3 FLOPs, best of N; also
  torch.mm at the tiny model's decode shape (16 x 256 by 256 x 768) and prefill shape
  (512 x 256 by 256 x 768), the rates its steps actually see.

The best repeat is what counts (a slower one is another process taking the core, not the
hardware). `--json` prints one object: every repeat of every figure, the host's CPU model
name, and the two figures the fidelity protocol uses (`read_gb_s`: the best read rate;
`matmul_gflop_s`: the best float32 matmul rate of any shape, the core's attainable dense
peak). benchmarks/sim_fidelity.py runs this before every measurement of the engine, so the
simulator models the core the engine ran on, not a catalog entry of another machine.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch


def rates(work: float, fn: Callable[[], object], repeats: int, inner: int = 1) -> list[float]:
    """Work per second of `fn()` for each repeat (each times `inner` calls)."""
    fn()  # warm: page faults, library initialisation
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append(work * inner / (time.perf_counter() - t0))
    return out


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ('' where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return ""


def measure(repeats: int) -> dict[str, object]:
    """Every figure's repeats (GB/s, GFLOP/s), the CPU model and the two headline figures."""
    torch.set_num_threads(1)
    n = 64 * 1024 * 1024  # 256 MiB of float32
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    figures: dict[str, list[float]] = {}
    figures["copy_gb_s"] = rates(2 * src.nbytes / 1e9, lambda: np.copyto(dst, src), repeats)
    figures["read_gb_s"] = rates(src.nbytes / 1e9, lambda: np.add.reduce(src), repeats)
    m = 1024
    a = np.random.default_rng(0).standard_normal((m, m), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((m, m), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    figures["numpy_mm_1024_gflop_s"] = rates(2 * m**3 / 1e9, lambda: a @ b, repeats)
    figures["torch_mm_1024_gflop_s"] = rates(2 * m**3 / 1e9, lambda: torch.mm(ta, tb), repeats)
    for rows in (16, 512):
        x, w = torch.randn(rows, 256), torch.randn(256, 768)
        figures[f"torch_mm_{rows}x256x768_gflop_s"] = rates(
            2 * rows * 256 * 768 / 1e9, functools.partial(torch.mm, x, w), repeats, 200
        )
    matmul = max(max(v) for k, v in figures.items() if k.endswith("gflop_s"))
    return {
        "cpu_model": cpu_model(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "repeats": repeats,
        "figures": figures,
        "read_gb_s": max(figures["read_gb_s"]),
        "matmul_gflop_s": matmul,
    }


def main() -> None:
    """Measure and print (a table, or one JSON object with --json)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7, help="repeats per figure (default 7)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: give at least 1")
    result = measure(args.repeats)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['cpu_model']}; affinity {result['affinity']}, torch threads 1")
    figures = result["figures"]
    assert isinstance(figures, dict)
    for name, values in figures.items():
        print(f"{name}: " + " ".join(f"{v:.2f}" for v in values) + f"  best {max(values):.2f}")
    print(f"read_gb_s {result['read_gb_s']:.2f}, matmul_gflop_s {result['matmul_gflop_s']:.1f}")


if __name__ == "__main__":
    main()
