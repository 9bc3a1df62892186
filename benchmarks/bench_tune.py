"""Benchmark: `servekit tune`'s search of the built-in M3 in simulation (not a test).

The must-show of issue #19: MiniMax-M3-MXFP8 on 8x A800 with the deployment's workload
(1024 in, 128 out, temperature 0.7, a closed loop) and an SLO of 60 tok/s per stream,
the whole default space (4,608 candidates). Each run is the library call the command makes
(`run_tune`, simulation only); printed per run: wall and CPU seconds of the search, points
simulated and reused, candidates and feasible ones, the winner's speculation, max_num_seqs,
SLO-meeting load, goodput per GPU and KV headroom at 128K; then the spread over the runs.
A second part repeats the winner's and its twins' evaluation over simulation seeds, the
spread the ranking's 2% tie is set against.

Run on one core: taskset -c 0 .venv/bin/python benchmarks/bench_tune.py [--runs 3] [--seeds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from servekit.analyze.slo import parse_slo
from servekit.profiles import load_profile
from servekit.sim.build import profile_step_params
from servekit.tune.evaluate import SimModel, Simulator
from servekit.tune.run import run_tune
from servekit.tune.search import candidates
from servekit.tune.space import default_space
from servekit.tune.spec import TuneSpec
from servekit.tune.workload import TuneWorkload

PROFILE = "minimax-m3-mxfp8-8xa800"
SLO = "per_stream_p50>=60tok/s"


class _Quiet:
    def say(self, text: str) -> None:
        """Nothing."""

    def progress(self, stage: str, done: int, total: int) -> None:
        """Nothing."""


def _spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f}, "
        f"n={len(values)})"
    )


def search_runs(runs: int) -> None:
    """The whole tune, `runs` times."""
    profile = load_profile(PROFILE)
    workload = TuneWorkload("concurrency", 1024, 128, 0.7, 256)
    space = default_space(profile, graph_flag=True, reuse=False, needed_len=workload.needed_len())
    walls, cpus = [], []
    for run in range(runs):
        with tempfile.TemporaryDirectory() as out:
            spec = TuneSpec(profile, PROFILE, parse_slo(SLO), workload, space, Path(out))
            wall, cpu = time.perf_counter(), time.process_time()
            doc = run_tune(spec, _Quiet())
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        s = doc.searches[0]
        w = doc.winner
        assert w is not None
        print(
            f"run {run}: {walls[-1]:.1f} s wall, {cpus[-1]:.1f} s CPU; {doc.candidates_total} "
            f"candidates, {doc.feasible} feasible; {s.simulated} points simulated, {s.reused} "
            f"reused; rungs {[(r.requests, r.evaluated) for r in s.rungs]}"
        )
        print(f"  winner {w.label}: load {w.load}, {w.goodput_per_gpu:.4f} req/s per GPU")
        print(f"  speculation: {w.speculation}")
        print(f"  max_num_seqs {w.max_num_seqs}; KV {w.kv.kv_cache_tokens:,} tokens = "
              f"{w.kv.requests_at_max_model_len:.2f} x {w.kv.max_model_len}")  # fmt: skip
        print(f"  finding: {s.speculation}")
    print(f"wall: {_spread(walls)} s; CPU: {_spread(cpus)} s")


def seed_spread(seeds: int) -> None:
    """The finalists' goodput and ladder throughput over simulation seeds."""
    profile = load_profile(PROFILE)
    workload = TuneWorkload("concurrency", 1024, 128, 0.7, 256)
    space = default_space(profile, graph_flag=True, reuse=False, needed_len=workload.needed_len())
    pool = [c for c in candidates(profile, list(space.candidates())) if c.feasibility.feasible]
    chosen = [c for c in pool if c.settings.max_num_seqs == 128
              and c.settings.max_num_batched_tokens == 4096
              and c.settings.gpu_memory_utilization == 0.99
              and c.settings.estimate_cudagraphs and c.settings.enable_chunked_prefill
              and c.settings.max_model_len == 131072]  # fmt: skip
    for c in chosen:
        goodputs, ladders = [], []
        for seed in range(seeds):
            model = SimModel(profile_step_params(profile), None, "profile")
            sim = Simulator(workload, parse_slo(SLO), model, seed=seed)
            goodputs.append(sim.search(c.replica(), 256).goodput_per_gpu)
            ladder = sim.ladder(c.replica(), 256)
            ladders.append(sum(r.output_tok_s for r in ladder) / len(ladder) / 8)
        spread = (max(ladders) - min(ladders)) / statistics.median(ladders)
        print(f"{c.settings.speculation.label():>6}: goodput/GPU {_spread(goodputs)}; ladder "
              f"tok/s/GPU {_spread(ladders)} (spread {spread:.1%})")  # fmt: skip


def main() -> None:
    """Run both parts."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    search_runs(args.runs)
    seed_spread(args.seeds)


if __name__ == "__main__":
    main()
