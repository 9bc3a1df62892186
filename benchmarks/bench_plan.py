"""Benchmark: planner and renderer throughput and CLI start-up time (not a test).

Run: .venv/bin/python benchmarks/bench_plan.py
"""

from __future__ import annotations

import subprocess
import sys
import time

from servekit.hardware import lookup_gpu
from servekit.names import TARGETS
from servekit.plan import make_plan, plan_inputs
from servekit.profiles import load_profile
from servekit.render import render

PROFILES = ["minimax-m3-mxfp8-8xa800", "llama-3.1-70b-4xh100", "deepseek-v3-8xh200"]


def per_call_ms(func: object, repeat: int) -> float:
    """Mean wall time of one call in milliseconds."""
    assert callable(func)
    start = time.perf_counter()
    for _ in range(repeat):
        func()
    return (time.perf_counter() - start) / repeat * 1000


def main() -> None:
    """Print one line per measurement."""
    for name in PROFILES:
        profile = load_profile(name)
        inputs = plan_inputs(profile, lookup_gpu(profile.hardware.gpu))
        ms = per_call_ms(lambda i=inputs: make_plan(i), 200)
        print(f"make_plan {name}: {ms:.3f} ms")
    misfit = load_profile("llama-3.1-70b-4xh100", overrides=["max_model_len=2000000"])
    misfit_inputs = plan_inputs(misfit, lookup_gpu(misfit.hardware.gpu))
    ms = per_call_ms(lambda: make_plan(misfit_inputs), 20)
    print(f"make_plan with largest-fitting search: {ms:.3f} ms")
    print(f"load_profile (extends): {per_call_ms(lambda: load_profile(PROFILES[0]), 50):.3f} ms")
    m3 = load_profile(PROFILES[0])
    for target in TARGETS:
        print(f"render {target}: {per_call_ms(lambda t=target: render(m3, t), 200):.3f} ms")
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "servekit", "plan", PROFILES[0], "--json"],
            check=True,
            capture_output=True,
        )
        runs.append(time.perf_counter() - start)
    print(f"servekit plan --json end to end (process): min {min(runs) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
