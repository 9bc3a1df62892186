"""Benchmark: the offline simulator's speed on the M3 sweep (not a test).

The sweep of issue #3: concurrency 1/4/16/128, 256 requests per point, 128 output tokens,
for the EAGLE3 and no-EAGLE3 profiles. Reports wall time and engine steps (events) per second.

Run: .venv/bin/python benchmarks/bench_sim.py
"""

from __future__ import annotations

import time

from servekit.profiles import load_profile
from servekit.sim.build import build_engine
from servekit.sim.offline import LoadPoint
from servekit.sim.sweep import simulate_sweep


def main() -> None:
    """Print wall time and events per second for each profile's sweep."""
    for name in ("minimax-m3-mxfp8-8xa800", "minimax-m3-mxfp8-8xa800-no-eagle3"):
        profile = load_profile(name)
        input_len = profile.simulator.input_len if profile.simulator else 1024
        points = [
            LoadPoint(f"c={c}", 256, input_len or 1024, 128, 0.7, concurrency=c)
            for c in (1, 4, 16, 128)
        ]
        start = time.perf_counter()
        results = simulate_sweep(lambda s, p=profile: build_engine(p, seed=s), points, seed=0)
        wall = time.perf_counter() - start
        steps = sum(r.stats.steps for r in results)
        request_steps = sum(r.stats.generation_tokens for r in results)
        print(
            f"{name}: 4 points x 256 requests in {wall:.2f} s; {steps} engine steps "
            f"({steps / wall:,.0f} steps/s), {request_steps:,} tokens "
            f"({request_steps / wall:,.0f} simulated tokens/s)"
        )


if __name__ == "__main__":
    main()
