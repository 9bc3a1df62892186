"""Chunked prefill on and off: when a waiting request's prefill may start."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servekit.errors import SimulationError
from servekit.profiles import load_profile
from servekit.sim.build import build_engine
from servekit.sim.engine import Engine, SimRequest

Make = Callable[..., Engine]
LLAMA = "llama-3.1-70b-4xh100"  # max_model_len 32768, max_num_batched_tokens 8192


def test_chunked_on_the_second_prompt_starts_with_the_budget_left(make_engine: Make) -> None:
    """Two 1500-token prompts, budget 2048: the second starts in the first step with a
    548-token chunk and finishes its prefill in the second."""
    engine = make_engine(budget=2048, max_model_len=2048)
    engine.add(SimRequest("a", prompt_tokens=1500, max_tokens=10))
    engine.add(SimRequest("b", prompt_tokens=1500, max_tokens=10))
    first, second = engine.step(), engine.step()
    assert first.batch.prefill_chunks == ((1500, 0), (548, 0))
    assert first.gained == (("a", 1),)
    assert second.batch.decode_contexts == (1500,)
    assert second.batch.prefill_chunks == ((952, 548),)
    assert second.gained == (("a", 1), ("b", 1))


def test_chunked_off_the_second_prompt_waits_for_the_next_step(make_engine: Make) -> None:
    """The same two prompts with chunked prefill off: the second does not fit the 548 tokens
    left, waits, and prefills whole in the next step."""
    engine = make_engine(budget=2048, max_model_len=2048, chunked=False)
    engine.add(SimRequest("a", prompt_tokens=1500, max_tokens=10))
    engine.add(SimRequest("b", prompt_tokens=1500, max_tokens=10))
    first = engine.step()
    assert first.batch.prefill_chunks == ((1500, 0),)
    assert [r.id for r in engine.waiting] == ["b"]
    second = engine.step()
    assert second.batch.decode_contexts == (1500,)
    assert second.batch.prefill_chunks == ((1500, 0),)
    assert second.gained == (("a", 1), ("b", 1))


def test_chunked_off_the_queue_waits_behind_a_prompt_that_does_not_fit(
    make_engine: Make,
) -> None:
    """Admission stops at the first waiting prompt that does not fit (FCFS): a short prompt
    behind it waits too, though the budget left would hold it."""
    engine = make_engine(budget=2048, max_model_len=2048, chunked=False)
    for rid, prompt in (("a", 1500), ("b", 1500), ("c", 100)):
        engine.add(SimRequest(rid, prompt_tokens=prompt, max_tokens=10))
    assert engine.step().batch.prefill_chunks == ((1500, 0),)
    assert [r.id for r in engine.waiting] == ["b", "c"]
    assert engine.step().batch.prefill_chunks == ((1500, 0), (100, 0))


def test_chunked_off_a_prefix_hit_counts_against_the_budget_only_for_what_is_left(
    make_engine: Make,
) -> None:
    """A prompt whose prefix is cached needs only its uncached tokens to fit; a lookup that
    does not fit is not counted until the request is admitted (as vLLM counts it)."""
    engine = make_engine(budget=2048, max_model_len=2048, chunked=False)
    shared = list(range(1500))
    engine.add(SimRequest("a", 1500, 10, token_ids=shared))
    engine.add(SimRequest("b", 1500, 10, token_ids=shared))  # hits a's 93 full blocks
    engine.add(SimRequest("c", 1500, 10, token_ids=list(range(5000, 6500))))
    first = engine.step()
    assert first.batch.prefill_chunks == ((1500, 0), (12, 1488))
    assert [r.id for r in engine.waiting] == ["c"]
    stats = engine.stats
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (3000, 1488)
    assert engine.step().batch.prefill_chunks == ((1500, 0),)
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (4500, 1488)


def test_chunked_off_needs_a_budget_of_max_model_len(make_engine: Make) -> None:
    """vLLM refuses to start with chunked prefill off and max_num_batched_tokens below
    max_model_len, and so does the engine, naming both and the fix."""
    with pytest.raises(SimulationError, match="max_num_batched_tokens 2048 must be at least"):
        make_engine(budget=2048, max_model_len=4096, chunked=False)
    make_engine(budget=2048, max_model_len=4096)  # chunked: any budget


def test_profile_switch_turns_chunking_off() -> None:
    """serve_args.enable_chunked_prefill: false reaches the engine (unset means on); with
    the profile's budget below max_model_len build_engine refuses, naming both values."""
    assert build_engine(load_profile(LLAMA)).limits.enable_chunked_prefill
    with pytest.raises(SimulationError) as caught:
        build_engine(load_profile(LLAMA, overrides=("enable_chunked_prefill=false",)))
    assert "max_num_batched_tokens 8192" in caught.value.message
    assert "max_model_len 32768" in caught.value.message
    assert caught.value.fix is not None
    assert "raise max_num_batched_tokens to 32768" in caught.value.fix
    off = load_profile(
        LLAMA, overrides=("enable_chunked_prefill=false", "max_num_batched_tokens=32768")
    )
    assert not build_engine(off).limits.enable_chunked_prefill


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 40),
    blocks=st.integers(40, 400),
    seqs=st.integers(1, 16),
    budget=st.integers(300, 1024),
    k=st.sampled_from([0, 3]),
    seed=st.integers(0, 10_000),
)
def test_chunked_off_conserves_requests_and_never_splits_a_prefill(
    make_engine: Make, n: int, blocks: int, seqs: int, budget: int, k: int, seed: int
) -> None:
    """With chunked prefill off every request finishes with exactly max_tokens, blocks
    return, and no request is ever left part-way through a prefill after a step."""
    engine = make_engine(
        blocks=blocks, seqs=seqs, budget=budget, k=k, seed=seed, chunked=False, max_model_len=300
    )
    rng = random.Random(seed)
    wanted = {}
    for i in range(n):
        req = SimRequest(str(i), rng.randint(1, 200), rng.randint(1, 100), rng.random())
        wanted[req.id] = req.max_tokens
        engine.add(req)
    got: dict[str, int] = {}
    for _ in range(200_000):
        if engine.idle:
            break
        result = engine.step()
        assert not any(r.prefilling for r in engine.running)
        for rid, tokens in result.gained:
            got[rid] = got.get(rid, 0) + tokens
    assert engine.idle
    assert got == wanted
    assert engine.free_blocks == blocks
