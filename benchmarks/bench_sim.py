"""Benchmark: the offline simulator's speed on the M3 sweep (not a test).

The sweep of issue #3: concurrency 1/4/16/128, 256 requests per point, 128 output tokens,
for the EAGLE3 and no-EAGLE3 profiles. Each profile's sweep runs `--runs` times; the figure
is simulated output tokens per second of wall time (median, with min and max over the
runs), plus engine steps per second, and separately the time `sweep_summary` takes to turn
the records into summary.json (metrics and bootstrap intervals), which is not the engine.
Tokens per CPU second (process time) are printed too: on a shared machine they show what
the wall figure would be without other processes on the core.

Run on one core: taskset -c 0 .venv/bin/python benchmarks/bench_sim.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from servekit.profiles import load_profile
from servekit.results.summary import Workload
from servekit.sim.build import build_engine
from servekit.sim.offline import LoadPoint
from servekit.sim.sweep import simulate_sweep, sweep_summary

PROFILES = ("minimax-m3-mxfp8-8xa800", "minimax-m3-mxfp8-8xa800-no-eagle3")


def _spread(values: list[float], fmt: str) -> str:
    return (
        f"median {statistics.median(values):{fmt}} "
        f"(min {min(values):{fmt}}, max {max(values):{fmt}}, n={len(values)})"
    )


def main() -> None:
    """Print each profile's sweep speed over several runs, then the total."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    total_walls = [0.0] * runs
    total_tokens = 0
    for name in PROFILES:
        profile = load_profile(name)
        input_len = (profile.simulator.input_len if profile.simulator else None) or 1024
        points = [
            LoadPoint(f"c={c}", 256, input_len, 128, 0.7, concurrency=c) for c in (1, 4, 16, 128)
        ]
        walls, cpus, summary_walls = [], [], []
        tokens = steps = 0
        for run in range(runs):
            start, cpu_start = time.perf_counter(), time.process_time()
            results = simulate_sweep(lambda s, p=profile: build_engine(p, seed=s), points, seed=0)
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu_start)
            total_walls[run] += walls[-1]
            tokens = sum(r.stats.generation_tokens for r in results)
            steps = sum(r.stats.steps for r in results)
            start = time.perf_counter()
            sweep_summary(
                results,
                profile_name=name,
                model=None,
                version="bench",
                started_at="bench",
                workload=Workload(
                    input_len=input_len,
                    output_len=128,
                    temperature=0.7,
                    requests_per_point=256,
                    seed=0,
                ),
            )
            summary_walls.append(time.perf_counter() - start)
        total_tokens += tokens
        print(
            f"{name}: {tokens:,} output tokens, {steps:,} engine steps; "
            f"wall {_spread(walls, '.3f')} s; "
            f"simulated output tok/s {_spread([tokens / w for w in walls], ',.0f')}; "
            f"per CPU second {_spread([tokens / c for c in cpus], ',.0f')}; "
            f"steps/s {statistics.median(steps / w for w in walls):,.0f}; "
            f"sweep_summary {_spread(summary_walls, '.3f')} s"
        )
    print(
        f"both profiles: {total_tokens:,} output tokens; simulated output tok/s "
        f"{_spread([total_tokens / w for w in total_walls], ',.0f')}"
    )


if __name__ == "__main__":
    main()
