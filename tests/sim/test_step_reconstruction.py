"""Tests of rebuilding engine steps from chunk arrivals (servekit.sim.fit_steps)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import pytest
from sim_helpers import jittered

from servekit.records import RequestRecord
from servekit.sim.engine import Engine, StepResult
from servekit.sim.fit_steps import reconstruct_steps, running_at
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.step_time import BatchShape, step_time_s

MakeEngine = Callable[..., Engine]


def recorded_run(engine: Engine, point: LoadPoint) -> tuple[list[RequestRecord], list[BatchShape]]:
    """Records of a simulated point and the batch of every step the engine ran."""
    batches: list[BatchShape] = []
    step = engine.step

    def recording() -> StepResult:
        result = step()
        batches.append(normal(result.batch))
        return result

    engine.step = recording  # type: ignore[method-assign]
    run = run_point(engine, point, random.Random(5))
    return run.records, batches


def normal(batch: BatchShape) -> BatchShape:
    """The batch with its requests in one order (a step's work does not depend on it)."""
    return BatchShape(
        tuple(sorted(batch.decode_contexts)),
        tuple(sorted(batch.verify_contexts)),
        tuple(sorted(batch.prefill_chunks)),
        batch.num_speculative_tokens,
    )


def rebuilt(records: list[RequestRecord], *, budget: int = 2048, k: int = 0) -> list[BatchShape]:
    """Every reconstructed step's batch, in order."""
    rec = reconstruct_steps(records, max_num_batched_tokens=budget, num_speculative_tokens=k)
    return [normal(b) for interval in rec.intervals for b in interval.batches]


@pytest.mark.parametrize(
    ("point", "budget", "k"),
    [
        (LoadPoint("c=1", 6, 300, 20, concurrency=1), 2048, 0),
        (LoadPoint("c=4", 12, 300, 20, concurrency=4), 2048, 0),
        (LoadPoint("rate", 30, 200, 30, rate_rps=40.0), 2048, 0),
        (LoadPoint("chunked", 8, 600, 12, concurrency=4), 256, 0),
        (LoadPoint("spec", 12, 300, 40, concurrency=4), 2048, 3),
        (LoadPoint("spec-rate", 20, 300, 40, rate_rps=30.0), 2048, 3),
    ],
    ids=["c1", "c4", "open-loop", "chunked-prefill", "spec-c4", "spec-open-loop"],
)
def test_reconstruction_matches_every_engine_step(
    make_engine: MakeEngine, point: LoadPoint, budget: int, k: int
) -> None:
    """Every step the engine ran is rebuilt with its exact batch (contexts, prefill chunks
    with tokens computed before, verifies), including prefill steps that streamed nothing."""
    records, batches = recorded_run(make_engine(seqs=16, budget=budget, k=k, seed=3), point)
    assert rebuilt(records, budget=budget, k=k) == batches


def test_busy_intervals_are_the_step_durations(make_engine: MakeEngine) -> None:
    """A busy interval lasts exactly the engine's step (to the nanosecond of the clock)."""
    engine = make_engine()
    records, _ = recorded_run(engine, LoadPoint("c=4", 12, 300, 20, concurrency=4))
    rec = reconstruct_steps(records, max_num_batched_tokens=2048)

    busy = [i for i in rec.intervals if not i.after_idle]
    assert len(busy) > 30
    for interval in busy:
        expected_ns = (
            sum(step_time_s(b, engine.model, engine.params) for b in interval.batches) * 1e9
        )
        assert abs(interval.end_ns - interval.start_ns - expected_ns) <= len(interval.batches)


def test_jitter_within_a_step_keeps_the_steps(make_engine: MakeEngine) -> None:
    """Chunks of one step spread over 300 us (steps last ~5 ms) still cluster into the same
    steps with the same batches."""
    records, batches = recorded_run(make_engine(), LoadPoint("c=4", 12, 300, 20, concurrency=4))
    assert rebuilt(jittered(records, 300_000, random.Random(1))) == batches


def coalesced(records: list[RequestRecord], every: int) -> list[RequestRecord]:
    """Request 0's chunks merged in pairs every `every` chunks (its stream fell behind)."""
    out = list(records)
    r = records[0]
    times, tokens = list(r.chunk_ns), list(r.chunk_tokens)
    i = 1
    while i + 1 < len(times):
        if i % every == 0:
            tokens[i + 1] += tokens[i]
            del times[i], tokens[i]
        i += 1
    out[0] = dataclasses.replace(r, chunk_ns=tuple(times), chunk_tokens=tuple(tokens))
    return out


def test_coalesced_chunks_of_one_request_keep_the_steps(make_engine: MakeEngine) -> None:
    """A chunk carrying two steps' tokens (no speculation) puts its request back into the
    step it missed; the batches are unchanged and the chunk is counted."""
    records, batches = recorded_run(make_engine(), LoadPoint("c=4", 12, 300, 20, concurrency=4))
    merged = coalesced(records, every=3)
    assert rebuilt(merged) == batches
    rec = reconstruct_steps(merged, max_num_batched_tokens=2048)
    assert rec.coalesced_chunks == sum(1 for n in merged[0].chunk_tokens if n > 1)


def test_usage_only_chunks_are_ignored(make_engine: MakeEngine) -> None:
    """Chunks that carried no token (a usage-only final chunk) are not steps."""
    records, batches = recorded_run(make_engine(), LoadPoint("c=4", 12, 300, 20, concurrency=4))
    with_usage = [
        dataclasses.replace(r, chunk_ns=(*r.chunk_ns, r.end_ns + 50_000),
                            chunk_tokens=(*r.chunk_tokens, 0))
        for r in records
    ]  # fmt: skip
    assert rebuilt(with_usage) == batches


def test_a_chunk_split_in_two_reads_is_one_delivery(make_engine: MakeEngine) -> None:
    """A step's chunk that reached the client as two (same arrival time, tokens split, as
    the vLLM CPU runs show 54-130 times per point) is still one step of its request."""
    records, batches = recorded_run(make_engine(), LoadPoint("c=4", 12, 300, 20, concurrency=4))
    r = records[1]
    split = dataclasses.replace(
        r,
        chunk_ns=(r.chunk_ns[0], *r.chunk_ns[1:5], r.chunk_ns[4], *r.chunk_ns[5:]),
        chunk_tokens=(r.chunk_tokens[0], *r.chunk_tokens[1:4], 1, 0, *r.chunk_tokens[5:]),
    )
    assert sum(split.chunk_tokens) == sum(r.chunk_tokens)
    assert rebuilt([records[0], split, *records[2:]]) == batches


def test_running_requests_match_the_engine_samples(make_engine: MakeEngine) -> None:
    """The reconstruction's running requests at the engine's sample times are what the
    engine had running: within one (a request finishing in the sampled step), mostly equal."""
    engine = make_engine()
    run = run_point(engine, LoadPoint("rate", 100, 200, 30, rate_rps=20.0), random.Random(2))
    rec = reconstruct_steps(run.records, max_num_batched_tokens=2048)
    times = [int(t * 1e9) for t, *_ in run.samples]
    mine = running_at(rec, times)
    served = [running for _, _, running, _ in run.samples]
    assert len(mine) == len(served) > 10
    assert max(abs(a - b) for a, b in zip(mine, served, strict=True)) <= 1
    assert sum(a == b for a, b in zip(mine, served, strict=True)) >= 0.9 * len(served)


def test_coalesced_verify_chunks_are_split_into_their_steps(make_engine: MakeEngine) -> None:
    """With speculation, two verify chunks of one request merged into one of more than
    k + 1 tokens are two verify steps again: the batches are unchanged."""
    engine = make_engine(seqs=16, k=3, seed=3)
    records, batches = recorded_run(engine, LoadPoint("spec", 12, 300, 40, concurrency=4))
    r = records[0]
    big = next(i for i in range(1, len(r.chunk_tokens) - 1)
               if r.chunk_tokens[i] + r.chunk_tokens[i + 1] > 4)  # fmt: skip
    merged = dataclasses.replace(
        r,
        chunk_ns=r.chunk_ns[:big] + r.chunk_ns[big + 1 :],
        chunk_tokens=(*r.chunk_tokens[:big], r.chunk_tokens[big] + r.chunk_tokens[big + 1],
                      *r.chunk_tokens[big + 2 :]),
    )  # fmt: skip
    assert rebuilt([merged, *records[1:]], k=3) == batches


@pytest.mark.parametrize("k", [0, 3])
def test_first_token_delivered_with_the_next_step(make_engine: MakeEngine, k: int) -> None:
    """At concurrency 1, a first token that reached the client together with the next
    step's tokens (the vLLM CPU runs show it) still gives the prefill step and the step
    after it, with and without speculation."""
    engine = make_engine(k=k, seed=3)
    records, batches = recorded_run(engine, LoadPoint("c=1", 4, 300, 24, concurrency=1))
    merged = [
        dataclasses.replace(
            r, chunk_ns=r.chunk_ns[1:],
            chunk_tokens=(r.chunk_tokens[0] + r.chunk_tokens[1], *r.chunk_tokens[2:]),
        )
        for r in records
    ]  # fmt: skip
    assert rebuilt(merged, k=k) == batches
