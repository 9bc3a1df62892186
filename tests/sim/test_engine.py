"""Tests of the simulated engine's scheduling, KV blocks, preemption and spec decode."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servekit.errors import SimulationError
from servekit.sim.engine import Engine, SimRequest
from servekit.sim.offline import LoadPoint, run_point

Make = Callable[..., Engine]


def drain(engine: Engine, limit: int = 100_000) -> list[str]:
    finished: list[str] = []
    for _ in range(limit):
        if engine.idle:
            return finished
        finished += engine.step().finished
    raise AssertionError("engine did not drain")


def test_prefill_then_one_token_per_decode_step(make_engine: Make) -> None:
    """A request prefills in one step (first token), then gains one token per step."""
    engine = make_engine()
    engine.add(SimRequest("a", prompt_tokens=100, max_tokens=4))
    first = engine.step()
    assert first.gained == (("a", 1),)
    assert first.batch.prefill_chunks == ((100, 0),)
    gains = [engine.step().gained for _ in range(3)]
    assert gains == [(("a", 1),)] * 3
    assert engine.idle
    assert engine.free_blocks == 1000


def test_chunked_prefill_respects_budget(make_engine: Make) -> None:
    """A prompt longer than max_num_batched_tokens is prefilled over several steps."""
    engine = make_engine(budget=256)
    engine.add(SimRequest("a", prompt_tokens=600, max_tokens=2))
    chunks = [engine.step().batch.prefill_chunks for _ in range(3)]
    assert chunks == [((256, 0),), ((256, 256),), ((88, 512),)]


def test_decode_first_then_admission(make_engine: Make) -> None:
    """Running decodes are scheduled before new prefills take the rest of the budget."""
    engine = make_engine(budget=100)
    engine.add(SimRequest("a", prompt_tokens=50, max_tokens=10))
    engine.step()
    engine.add(SimRequest("b", prompt_tokens=500, max_tokens=10))
    step = engine.step()
    assert step.batch.decode_contexts == (50,)
    assert step.batch.prefill_chunks == ((99, 0),)


def test_max_num_seqs_caps_running(make_engine: Make) -> None:
    """No more than max_num_seqs requests run at once; the rest wait."""
    engine = make_engine(seqs=3)
    for i in range(5):
        engine.add(SimRequest(str(i), prompt_tokens=10, max_tokens=5))
    engine.step()
    assert len(engine.running) == 3
    assert len(engine.waiting) == 2


def test_preemption_only_when_blocks_run_out(make_engine: Make) -> None:
    """With too few blocks, the last admitted request is preempted and later recomputed."""
    engine = make_engine(blocks=12)  # 192 tokens of cache
    engine.add(SimRequest("a", prompt_tokens=64, max_tokens=64))
    engine.add(SimRequest("b", prompt_tokens=64, max_tokens=64))
    finished = drain(engine)
    assert sorted(finished) == ["a", "b"]
    assert engine.stats.preemptions > 0
    assert engine.free_blocks == 12
    roomy = make_engine(blocks=1000)
    roomy.add(SimRequest("a", prompt_tokens=64, max_tokens=64))
    roomy.add(SimRequest("b", prompt_tokens=64, max_tokens=64))
    drain(roomy)
    assert roomy.stats.preemptions == 0


def test_too_long_request_is_rejected(make_engine: Make) -> None:
    """A request over max_model_len is refused, as vLLM answers 400."""
    with pytest.raises(SimulationError, match="over max_model_len"):
        make_engine().add(SimRequest("a", prompt_tokens=8000, max_tokens=500))


def test_spec_decode_gains_up_to_k_plus_one(make_engine: Make) -> None:
    """With k=3, each decode step gains 1 to 4 tokens in one chunk; acceptance is counted."""
    engine = make_engine(k=3, seed=4)
    engine.add(SimRequest("a", prompt_tokens=20, max_tokens=200))
    engine.step()
    gains = []
    while not engine.idle:
        result = engine.step()
        gains += [t for _, t in result.gained]
    assert all(1 <= g <= 4 for g in gains)
    assert sum(gains) == 199
    s = engine.stats
    assert s.accepted_tokens == sum(gains) - len(gains)
    assert s.accepted_per_position[0] >= s.accepted_per_position[1] >= s.accepted_per_position[2]
    assert 1 + s.accepted_tokens / s.drafts == pytest.approx(1 + 0.8 + 0.48 + 0.24, abs=0.3)


def test_acceptance_depends_on_temperature(make_engine: Make) -> None:
    """Greedy requests accept more draft tokens than hot ones."""

    def mean_gain(temperature: float) -> float:
        engine = make_engine(k=3, seed=1)
        engine.add(SimRequest("a", 20, 2000, temperature=temperature))
        drain(engine)
        return 1 + engine.stats.accepted_tokens / engine.stats.drafts

    assert mean_gain(0.0) > mean_gain(1.0) + 0.3


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 40),
    blocks=st.integers(40, 400),
    seqs=st.integers(1, 16),
    budget=st.integers(64, 1024),
    k=st.sampled_from([0, 3]),
    seed=st.integers(0, 10_000),
)
def test_requests_and_tokens_are_conserved(
    make_engine: Make, n: int, blocks: int, seqs: int, budget: int, k: int, seed: int
) -> None:
    """Every request finishes with exactly max_tokens; blocks return; no needless preemption."""
    engine = make_engine(blocks=blocks, seqs=seqs, budget=budget, k=k, seed=seed)
    rng = random.Random(seed)
    demand = 0
    wanted = {}
    for i in range(n):
        req = SimRequest(str(i), rng.randint(1, 200), rng.randint(1, 100), rng.random())
        wanted[req.id] = req.max_tokens
        demand += -(-(req.prompt_tokens + req.max_tokens + k) // 16)
        engine.add(req)
    got: dict[str, int] = {}
    for _ in range(200_000):
        if engine.idle:
            break
        result = engine.step()
        for rid, tokens in result.gained:
            got[rid] = got.get(rid, 0) + tokens
    assert engine.idle
    assert got == wanted
    assert engine.free_blocks == blocks
    if demand <= blocks:  # everything fits at once: preemption would be a bug
        assert engine.stats.preemptions == 0


def test_same_seed_same_records(make_engine: Make) -> None:
    """The same seed gives the same records; another seed gives different timings."""
    point = LoadPoint("c=4", 32, 100, 50, 0.7, concurrency=4)

    def run(seed: int) -> list[tuple[int, ...]]:
        result = run_point(make_engine(k=3, seed=seed), point, random.Random(seed))
        return [r.chunk_ns for r in result.records]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_throughput_rises_with_concurrency_until_kv_saturates(make_engine: Make) -> None:
    """Closed-loop throughput does not fall as concurrency rises while KV has room."""
    from servekit.analyze.summarize import point_metrics

    previous = 0.0
    for c in (1, 2, 4, 8, 16, 32):
        point = LoadPoint(f"c={c}", 64, 200, 100, 0.0, concurrency=c)
        run = run_point(make_engine(blocks=5000), point, random.Random(0))
        tput = point_metrics(run.records, ci=False).output_throughput_tok_s
        assert tput >= previous * 0.99
        previous = tput


def test_abort_frees_blocks_and_stops_work(make_engine: Make) -> None:
    """Aborting a running or waiting request removes it and returns its blocks."""
    engine = make_engine(seqs=1)
    engine.add(SimRequest("a", prompt_tokens=100, max_tokens=50))
    engine.add(SimRequest("b", prompt_tokens=100, max_tokens=50))
    engine.step()
    assert engine.abort("a")
    assert engine.abort("b")
    assert not engine.abort("missing")
    assert engine.idle
    assert engine.free_blocks == 1000
