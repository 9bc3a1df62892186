"""tune's search in the simulator: the SLO-meeting load, successive halving, the ranking."""

from __future__ import annotations

import dataclasses

import pytest
from tune_helpers import M3, m3_settings

from servekit.analyze.slo import parse_slo
from servekit.profiles import load_profile
from servekit.sim.build import profile_step_params
from servekit.tune.evaluate import SimModel, Simulator
from servekit.tune.search import (
    ETA,
    MIN_REQUESTS,
    candidates,
    pareto,
    rung_requests,
    search,
)
from servekit.tune.space import Settings, Speculation, default_space
from servekit.tune.workload import TuneWorkload


def _sim(
    slo: str,
    *,
    loop: str = "concurrency",
    requests: int = 64,
    temperature: float = 0.7,
) -> Simulator:
    profile = load_profile(M3)
    workload = TuneWorkload(loop, 1024, 128, temperature, requests)  # type: ignore[arg-type]
    return Simulator(workload, parse_slo(slo), SimModel(profile_step_params(profile), None, "t"))


def _replica(settings: Settings) -> object:
    profile = load_profile(M3)
    (candidate,) = candidates(profile, [settings])
    assert candidate.feasibility.feasible
    return candidate.replica()


def test_concurrency_search_finds_the_last_load_that_meets_the_slo() -> None:
    """The load found meets the SLO and the next one does not; goodput is the request rate
    there, per GPU over the 8 GPUs (the seed's 60 tok/s per stream holds up to c=2 at 0.7)."""
    sim = _sim("per_stream_p50>=60tok/s")
    replica = _replica(m3_settings(estimate_cudagraphs=True))
    found = sim.search(replica, 64)  # type: ignore[arg-type]
    assert found.load == 2
    assert found.at is not None
    assert found.at.met
    assert not sim.run(replica, 3, 64).met  # type: ignore[arg-type]
    assert found.goodput_rps == found.at.request_rps
    assert found.goodput_per_gpu == pytest.approx(found.goodput_rps / 8)
    assert [r.load for r in found.tried] == [1, 2, 4, 3]


def test_without_speculation_the_slo_is_not_met_at_all() -> None:
    """No EAGLE3: about 55 tok/s per stream even alone, so no load meets 60."""
    found = _sim("per_stream_p50>=60tok/s").search(
        _replica(m3_settings(estimate_cudagraphs=True, speculation=Speculation())), 64
    )  # type: ignore[arg-type]
    assert found.load is None
    assert found.goodput_rps == 0


def test_a_slo_met_at_max_num_seqs_is_capped_there() -> None:
    """Past max_num_seqs a closed loop only queues: the search stops at it."""
    found = _sim("tpot_p50<=10s").search(
        _replica(m3_settings(estimate_cudagraphs=True, max_num_seqs=16)), 32
    )  # type: ignore[arg-type]
    assert found.load == 16
    assert found.capped


def test_rate_search_brackets_the_rate_within_its_precision() -> None:
    """An open loop's SLO-meeting rate meets the SLO and 1.05x of it does not."""
    sim = _sim("tpot_p50<=30ms", loop="rate", requests=128)
    replica = _replica(m3_settings(estimate_cudagraphs=True, speculation=Speculation()))
    found = sim.search(replica, 128)  # type: ignore[arg-type]
    assert found.load is not None
    assert found.at is not None
    assert found.at.met
    assert not found.capped
    assert not sim.run(replica, found.load * 1.06, 128).met  # type: ignore[arg-type]


def test_candidates_that_differ_in_memory_only_share_simulations() -> None:
    """gpu_memory_utilization and the graph estimate do not change the steps: a candidate
    with a larger KV pool reuses the runs of one whose pool never ran short, and gets what a
    fresh simulation of its own gives."""
    sim = _sim("per_stream_p50>=60tok/s")
    small = _replica(m3_settings(gpu_memory_utilization=0.95, estimate_cudagraphs=False))
    large = _replica(m3_settings(estimate_cudagraphs=False))
    assert large.num_gpu_blocks > small.num_gpu_blocks  # type: ignore[attr-defined]
    sim.search(small, 64)  # type: ignore[arg-type]
    simulated = sim.simulated
    shared = sim.search(large, 64)  # type: ignore[arg-type]
    assert sim.simulated == simulated  # every point reused
    fresh = _sim("per_stream_p50>=60tok/s").search(large, 64)  # type: ignore[arg-type]
    assert shared == fresh


def test_a_pool_that_ran_short_is_not_shared() -> None:
    """A run whose KV pool refused blocks is specific to that pool: a larger pool simulates
    its own (and its result differs)."""
    sim = _sim("per_stream_p50>=60tok/s")
    base = _replica(m3_settings(estimate_cudagraphs=True))
    tiny = dataclasses.replace(base, num_gpu_blocks=12)  # type: ignore[type-var]
    short = sim.run(tiny, 4, 64)  # type: ignore[arg-type]
    simulated = sim.simulated
    full = sim.run(base, 4, 64)  # type: ignore[arg-type]
    assert sim.simulated == simulated + 1
    assert full != short


def test_rung_fidelities_grow_by_eta_to_the_full_count() -> None:
    """Rungs end at the full request count, each earlier ETA times fewer (floor MIN)."""
    assert rung_requests(256, 6, 5) == [256]
    assert rung_requests(256, 1000, 5) == [
        max(256 // ETA**3, MIN_REQUESTS),
        256 // ETA**2,
        256 // ETA,
        256,
    ]


def test_m3_search_finds_speculation_on_at_low_load_and_its_schedule() -> None:
    """On the built-in M3 with the seed's workload and 60 tok/s per stream, speculation is
    needed to meet the SLO at all, and above a batch size it costs throughput: the search
    proposes vLLM's per-batch-size schedule (drafts up to that batch, none above)."""
    profile = load_profile(M3)
    space = default_space(profile, graph_flag=True, reuse=False, needed_len=1152)
    space = dataclasses.replace(
        space,
        max_num_seqs=(64, 128),
        max_num_batched_tokens=(4096,),
        parallel=((8, 1),),
        enable_chunked_prefill=(True,),
        max_model_len=(131072,),
    )
    sim = _sim("per_stream_p50>=60tok/s")
    result = search(profile, list(space.candidates()), sim, finalists=3)
    leader = result.finalists[0]
    assert leader.candidate.settings.speculation.on
    assert leader.scored.evaluation.load == 2
    assert result.speculation is not None
    assert "num_speculative_tokens_per_batch_size" in result.speculation
    offs = [f for f in result.finalists if not f.candidate.settings.speculation.on]
    assert offs
    assert all(f.scored.evaluation.goodput_rps == 0 for f in offs)
    front = pareto(result.finalists)
    assert front == sorted(front, key=lambda p: p[2])
    assert pareto(result.finalists[::-1]) == front  # ties too: a total order, not set order
    # the fastest streams come from speculation, the most throughput per GPU without it
    ids = {f.candidate.ident: f.candidate.settings.speculation for f in result.finalists}
    assert ids[front[-1][0]].on
