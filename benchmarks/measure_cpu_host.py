"""Measure the CPU host the engine tier's vLLM CPU runs on: one core's memory bandwidth and
float32 matmul rate (the figures of the `CPU-HOST-1CORE` entry in hardware/gpus.yaml).

Run pinned to the server's core with one BLAS / OpenMP thread, as vLLM runs there:
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 taskset -c 1 .venv/bin/python \
      benchmarks/measure_cpu_host.py [REPEATS]

- memory bandwidth: `np.copyto` of a 256 MiB float32 array (8x the 32 MiB L3), counted as
  read + write bytes, and `np.add.reduce` of it (read only, what a step's weight and KV
  reads are), best of REPEATS;
- float32 matmul: torch.mm (oneDNN/MKL, the library vLLM CPU's linear layers call) and
  numpy.matmul (OpenBLAS) of 1024 x 1024 by 1024 x 1024, 2 n^3 FLOPs, best of REPEATS;
  also torch.mm at the tiny model's decode shapes (16 x 256 by 256 x 768) and prefill
  shapes (512 x 256 by 256 x 768), the rates its steps actually see.
Prints every repeat and the best; the best is what the entry records (other helpers share
the machine, so slower repeats are other processes, not the hardware).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch


def best_rate(work: float, fn: object, repeats: int, inner: int = 1) -> list[float]:
    """Work per second of `fn()` for each repeat (each times `inner` calls)."""
    assert callable(fn)
    fn()  # warm: page faults, library initialisation
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        rates.append(work * inner / (time.perf_counter() - t0))
    return rates


def main() -> None:
    """Measure and print."""
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    torch.set_num_threads(1)
    print(f"affinity {sorted(os.sched_getaffinity(0))}, torch threads {torch.get_num_threads()}")
    n = 64 * 1024 * 1024  # 256 MiB of float32
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    bw = best_rate(2 * src.nbytes, lambda: np.copyto(dst, src), repeats)
    print("copy GB/s (read+write):", " ".join(f"{r / 1e9:.2f}" for r in bw),
          f"best {max(bw) / 1e9:.2f}")  # fmt: skip
    rd = best_rate(src.nbytes, lambda: np.add.reduce(src), repeats)
    print("read GB/s (sum):", " ".join(f"{r / 1e9:.2f}" for r in rd),
          f"best {max(rd) / 1e9:.2f}")  # fmt: skip
    m = 1024
    a = np.random.default_rng(0).standard_normal((m, m), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((m, m), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    np_rates = best_rate(2 * m**3, lambda: a @ b, repeats)
    print("numpy f32 matmul GFLOP/s:", " ".join(f"{r / 1e9:.1f}" for r in np_rates),
          f"best {max(np_rates) / 1e9:.1f}")  # fmt: skip
    t_rates = best_rate(2 * m**3, lambda: torch.mm(ta, tb), repeats)
    print("torch f32 mm 1024^3 GFLOP/s:", " ".join(f"{r / 1e9:.1f}" for r in t_rates),
          f"best {max(t_rates) / 1e9:.1f}")  # fmt: skip
    for rows in (16, 512):
        x = torch.randn(rows, 256)
        w = torch.randn(256, 768)
        rates = best_rate(2 * rows * 256 * 768, lambda x=x, w=w: torch.mm(x, w), repeats, 200)
        print(f"torch f32 mm {rows}x256x768 GFLOP/s:", " ".join(f"{r / 1e9:.1f}" for r in rates),
              f"best {max(rates) / 1e9:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
