"""The offline simulator's real traffic: trace replay, sessions and agent loops.

The engine here has 16-token KV blocks, which divide Mooncake's 512-token hash blocks: a
chain of n shared hash blocks is exactly 32n shared engine blocks. The engine grants a
request min(shared tokens, floor((L - 1) / 16) * 16) (its last prompt token is always
recomputed, in whole blocks): exactly the trace's implied hits rounded down to whole
16-token blocks (`implied_hits(trace, granule=16)`), and the implied figure itself
whenever the shared prefix is whole engine blocks short of the prompt's end.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from sim_helpers import tiny_model  # type: ignore[import-not-found]

from conftest import STEP  # type: ignore[import-not-found]
from servekit.errors import SimulationError
from servekit.records import RequestRecord
from servekit.sim.engine import Engine, EngineLimits
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.sweep import simulate_sweep
from servekit.sim.tokenizer import tokenize
from servekit.sim.traffic import SessionsPoint, TracePoint, TraceTraffic, block_ids
from servekit.workload.sessions import AgentSpec, Delay, SessionPlan, SessionsSpec, Turn
from servekit.workload.synthetic import arrival_offsets
from servekit.workload.traces import Trace, TraceRequest, implied_hit_rate, implied_hits

BLOCK = 16
TAGS = len(tokenize("<|user|>\n<|assistant|>\n"))  # a synthetic message's role tags: 11
TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"],
            },
        },
    },
)


def engine(seed: int = 0, *, max_model_len: int = 8192, blocks: int = 20_000) -> Engine:
    model = tiny_model(blocks, BLOCK)
    if max_model_len != model.max_model_len:
        import dataclasses

        model = dataclasses.replace(model, max_model_len=max_model_len)
    return Engine(model, EngineLimits(64, 2048), STEP, None, random.Random(seed))


def by_send_order(records: list[RequestRecord]) -> list[RequestRecord]:
    return sorted(records, key=lambda r: int(r.id.rpartition("-")[2]))


def sharing_trace() -> Trace:
    """Half the requests share their first two 512-token blocks; one pair repeats a chain
    of three; the rest share nothing; none shares its last (partial) block."""
    requests = []
    for i in range(24):
        own = tuple(1000 + 10 * i + j for j in range(5))
        if i % 2 == 0:
            ids = (1, 2, *own[:3])
        elif i in (7, 9):
            ids = (5, 6, 7, *own[:2])
        else:
            ids = own
        requests.append(TraceRequest(0.4 * i, 4 * 512 + 100, 8, ids, i + 1))
    return Trace("sharing.jsonl", "mooncake", tuple(requests), block_tokens=512)


def test_trace_hits_equal_the_implied_hits_exactly() -> None:
    trace = sharing_trace()
    eng = engine()
    run = run_point(eng, TracePoint("trace", trace), random.Random(0))
    total = sum(r.input_len for r in trace.requests)
    implied = implied_hits(trace)
    assert sum(implied) == 11 * 2 * 512 + 3 * 512  # 11 later sharers of 2 blocks, 1 of 3
    assert eng.stats.prefix_cache_queries == total
    assert eng.stats.prefix_cache_hits == sum(implied)
    assert eng.stats.prefix_cache_hits / total == implied_hit_rate(trace)
    records = by_send_order(run.records)
    assert [r.cached_tokens for r in records] == implied
    assert [r.scheduled_ns for r in records] == [round(r.offset_s * 1e9) for r in trace.requests]
    assert all(r.sent_ns == r.scheduled_ns and r.session is None for r in records)


def test_a_fully_shared_prompt_recomputes_its_last_engine_block() -> None:
    """Two identical 3-block prompts: the trace implies L - 1 hit tokens, the engine grants
    floor((L - 1) / 16) * 16 = L - 16 (L a multiple of 16)."""
    length = 3 * 512
    requests = tuple(TraceRequest(i * 1.0, length, 4, (1, 2, 3), i + 1) for i in range(2))
    trace = Trace("same.jsonl", "mooncake", requests, block_tokens=512)
    eng = engine()
    run_point(eng, TracePoint("trace", trace), random.Random(0))
    assert implied_hits(trace) == [0, length - 1]
    assert eng.stats.prefix_cache_hits == (length - 1) // BLOCK * BLOCK == length - BLOCK
    assert eng.stats.prefix_cache_hits == sum(implied_hits(trace, granule=BLOCK))


def test_partial_blocks_hit_their_tokens_in_whole_engine_blocks() -> None:
    """A partial last block is the start of the full one: identical 700-token prompts and a
    longer prompt extending them hit 688 tokens each (699 and 700 shared, rounded down to
    16-token blocks), as `implied_hits(trace, granule=16)` says."""
    requests = tuple(
        TraceRequest(i * 1.0, n, 4, ids, i + 1)
        for i, (n, ids) in enumerate([(700, (1, 2)), (700, (1, 2)), (1100, (1, 2, 3))])
    )
    trace = Trace("partial.jsonl", "mooncake", requests, block_tokens=512)
    eng = engine()
    run = run_point(eng, TracePoint("trace", trace), random.Random(0))
    assert implied_hits(trace) == [0, 699, 700]
    assert implied_hits(trace, granule=BLOCK) == [0, 688, 688]
    assert [r.cached_tokens for r in by_send_order(run.records)] == [0, 688, 688]


def test_trace_without_hash_ids_never_hits() -> None:
    requests = tuple(TraceRequest(i * 0.1, 700, 4, None, i + 1) for i in range(6))
    eng = engine()
    run = run_point(eng, TracePoint("trace", Trace("t", "burstgpt", requests)), random.Random(0))
    assert eng.stats.prefix_cache_hits == 0
    assert eng.stats.prefix_cache_queries == 6 * 700
    assert [r.cached_tokens for r in run.records] == [0] * 6


def test_the_sweep_passes_prefix_counters_to_the_server_block() -> None:
    trace = sharing_trace()
    [result] = simulate_sweep(lambda s: engine(s), [TracePoint("trace", trace)], seed=1)
    server = result.server_json()
    assert server.prefix_cache_queries == sum(r.input_len for r in trace.requests)
    assert server.prefix_cache_hits == sum(implied_hits(trace))
    fixed = simulate_sweep(
        lambda s: engine(s), [LoadPoint("c=2", 4, 100, 8, concurrency=2)], seed=1
    )
    assert fixed[0].server_json().prefix_cache_queries is None  # no ids, no lookups


THINK = Delay(1.0)


def two_turn_spec(count: int, *, think: Delay = THINK) -> SessionsSpec:
    # history after turn 1: 269 + 11 tag tokens + 40 = 320 tokens, a multiple of the block size
    plans = tuple(
        SessionPlan(f"s{i}", (Turn(None, 40, 269), Turn(None, 40, 269))) for i in range(count)
    )
    return SessionsSpec(plans, "synthetic", think, count)


def test_turn_two_hits_its_historys_full_blocks_and_starts_sooner() -> None:
    run = run_point(
        engine(), SessionsPoint("c=1", two_turn_spec(4), concurrency=1), random.Random(0)
    )
    turns = {(r.session, r.turn): r for r in run.records}
    history = 269 + TAGS + 40
    for i in range(4):
        first, second = turns[(f"s{i}", 1)], turns[(f"s{i}", 2)]
        assert first.cached_tokens == 0
        assert first.prompt_tokens == 269 + TAGS
        assert second.prompt_tokens == history + 269 + TAGS
        # the last output token's KV is never computed: its block is not full
        assert second.cached_tokens == (history - 1) // BLOCK * BLOCK == 304
        assert second.sent_ns == first.end_ns + 1_000_000_000  # the fixed think time
        assert (first.session_end, second.session_end) == (None, "completed")
    cold = run_point(
        engine(), LoadPoint("c=1", 1, history + 269 + TAGS, 40, concurrency=1), random.Random(0)
    )
    cold_ttft = cold.records[0].first_token_ns - cold.records[0].sent_ns  # type: ignore[operator]
    for i in range(4):
        second = turns[(f"s{i}", 2)]
        assert second.first_token_ns - second.sent_ns < cold_ttft  # type: ignore[operator]


def test_closed_and_open_loops_over_sessions() -> None:
    spec = two_turn_spec(6)
    closed = run_point(engine(), SessionsPoint("c=2", spec, concurrency=2), random.Random(0))
    starts = sorted(r.sent_ns for r in closed.records if r.turn == 1)
    assert starts[:2] == [0, 0]
    assert len(closed.records) == 12
    ends = sorted(r.end_ns for r in closed.records if r.session_end)
    assert starts[2] == ends[0]  # the next session starts when one ends
    opened = run_point(
        engine(), SessionsPoint("rate=2", spec, rate_rps=2.0, arrival="constant"), random.Random(0)
    )
    offsets = arrival_offsets("constant", 2.0, 6, random.Random(0))
    assert sorted(r.scheduled_ns for r in opened.records if r.turn == 1) == [
        int(offset * 1e9) for offset in offsets
    ]


def test_repeated_sessions_are_salted_rounds_that_miss_the_cache() -> None:
    """Four sessions from two conversations in one point: the repeats are a#2 and b#2, and
    their first turn, salted with "[round 2] ", hits at most the one engine block its chat
    header shares with the first round, not the whole first message."""
    words = " ".join(f"w{i}" for i in range(200))
    plans = tuple(SessionPlan(n, (Turn(f"{n}: {words}", 8), Turn("more", 8))) for n in "ab")
    spec = SessionsSpec(plans, "jsonl c.jsonl", Delay(0.0), 4)
    run = run_point(engine(), SessionsPoint("c=1", spec, concurrency=1), random.Random(0))
    first = {r.session: r for r in run.records if r.turn == 1}
    assert sorted(first) == ["a", "a#2", "b", "b#2"]
    assert first["a"].prompt_tokens > 10 * BLOCK
    assert first["a#2"].prompt_tokens > first["a"].prompt_tokens  # the salt's tokens
    assert (first["a#2"].cached_tokens or 0) <= BLOCK
    assert (first["b#2"].cached_tokens or 0) <= BLOCK


def test_text_turns_are_tokenized_like_the_live_simulator() -> None:
    plan = SessionPlan(
        "c1", (Turn("What is a KV cache?", 20), Turn("And paging?", 20)), "Be brief."
    )
    spec = SessionsSpec((plan,), "jsonl conv.jsonl", Delay(0.0), 1)
    run = run_point(engine(), SessionsPoint("c=1", spec, concurrency=1), random.Random(0))
    first, second = sorted(run.records, key=lambda r: r.turn or 0)
    head = "<|system|>\nBe brief.\n<|user|>\nWhat is a KV cache?\n<|assistant|>\n"
    assert first.prompt_tokens == len(tokenize(head))
    later = "\n<|user|>\nAnd paging?\n<|assistant|>\n"
    assert second.prompt_tokens == first.prompt_tokens + 20 + len(tokenize(later))
    assert second.sent_ns == first.end_ns  # think time 0


def agent_spec(turns: int, max_turns: int, count: int = 3) -> SessionsSpec:
    plans = tuple(
        SessionPlan(f"a{i}", tuple(Turn(None, 30, 200) for _ in range(turns))) for i in range(count)
    )
    agent = AgentSpec(TOOLS, Delay(0.25), '{"temp_c": 21}', max_turns)
    return SessionsSpec(plans, "synthetic", Delay(2.0), count, agent)


def test_agent_loops_call_a_tool_then_answer_after_the_tool_latency() -> None:
    run = run_point(
        engine(), SessionsPoint("c=3", agent_spec(2, 8), concurrency=3), random.Random(0)
    )
    tool_ids = len(tokenize('\n<|tool|>\n{"temp_c": 21}\n<|assistant|>\n'))
    for i in range(3):
        records = sorted(
            (r for r in run.records if r.session == f"a{i}"), key=lambda r: r.turn or 0
        )
        assert [r.turn for r in records] == [1, 2, 3, 4]
        assert [r.finish_reason for r in records] == ["tool_calls", "length"] * 2
        assert [r.tool_calls for r in records] == [1, 0, 1, 0]
        assert all(r.tool_args_invalid == 0 for r in records)
        call, answer, call2, _ = records
        assert 0 < call.output_tokens < 30
        assert answer.output_tokens == 30
        assert answer.sent_ns == call.end_ns + 250_000_000
        assert answer.prompt_tokens == call.prompt_tokens + call.output_tokens + tool_ids
        assert answer.cached_tokens == (answer.prompt_tokens - tool_ids - 1) // BLOCK * BLOCK
        assert call2.sent_ns == answer.end_ns + 2_000_000_000  # think time before turn 2
        assert [r.session_end for r in records] == [None, None, None, "completed"]


def test_agent_turn_limit_counts_model_responses() -> None:
    run = run_point(
        engine(), SessionsPoint("c=3", agent_spec(2, 3), concurrency=3), random.Random(0)
    )
    for i in range(3):
        records = sorted(
            (r for r in run.records if r.session == f"a{i}"), key=lambda r: r.turn or 0
        )
        assert [r.tool_calls for r in records] == [1, 0, 1]
        assert [r.session_end for r in records] == [None, None, "turn_limit"]


def test_a_history_past_max_model_len_fails_its_session_and_the_loop_goes_on() -> None:
    plans = tuple(
        SessionPlan(f"s{i}", (Turn(None, 40, 300), Turn(None, 40, 300))) for i in range(3)
    )
    spec = SessionsSpec(plans, "synthetic", Delay(0.5), 3)
    run = run_point(
        engine(max_model_len=600), SessionsPoint("c=1", spec, concurrency=1), random.Random(0)
    )
    assert len(run.records) == 6
    failed = [r for r in run.records if r.turn == 2]
    assert all(r.error_kind == "http_400" and r.session_end == "failed" for r in failed)
    assert all(r.first_token_ns is None and r.output_tokens == 0 for r in failed)
    assert "max_model_len 600" in (failed[0].error or "")


def test_fixed_length_points_still_refuse_oversized_requests() -> None:
    with pytest.raises(SimulationError, match="max_model_len"):
        run_point(
            engine(max_model_len=100), LoadPoint("c=1", 1, 90, 20, concurrency=1), random.Random(0)
        )


def test_same_seed_same_records() -> None:
    spec = two_turn_spec(5, think=Delay(1.5, "exponential"))
    agent = agent_spec(2, 4)
    points = [
        SessionsPoint("c=2", spec, concurrency=2, temperature=0.7),
        SessionsPoint("rate=1", agent, rate_rps=1.0),
        TracePoint("trace", sharing_trace()),
    ]

    def records(seed: int) -> list[list[RequestRecord]]:
        return [r.run.records for r in simulate_sweep(lambda s: engine(s), points, seed=seed)]

    assert records(3) == records(3)
    assert records(3)[0] != records(4)[0]  # the think times are drawn from the seed


def test_eagle_drafts_give_up_one_engine_block_per_hit() -> None:
    """With EAGLE-style drafts (the M3 EAGLE3 profile) vLLM drops the last block of every
    hit, so a trace's hits fall short of the implied ones by one engine block per hit."""
    trace = sharing_trace()
    model = tiny_model(20_000, BLOCK)
    eng = Engine(model, EngineLimits(64, 2048), STEP, None, random.Random(0), drop_eagle_block=True)
    run_point(eng, TracePoint("trace", trace), random.Random(0))
    implied = implied_hits(trace)
    assert eng.stats.prefix_cache_hits == sum(h - BLOCK for h in implied if h)


def test_a_send_is_at_its_arrival_time_even_mid_step() -> None:
    """A trace request that arrives while the engine is in a step is sent at its time (as a
    client sends it) and waits for that step: its TTFT includes the wait."""
    first = TraceRequest(0.0, 512, 400, None, 1)
    late = TraceRequest(0.5003, 512, 4, None, 2)  # lands inside a decode step of the first
    trace = Trace("t", "jsonl", (first, late))
    run = run_point(engine(), TracePoint("trace", trace), random.Random(0))
    second = by_send_order(run.records)[1]
    assert second.sent_ns == second.scheduled_ns == 500_300_000
    alone = run_point(engine(), TracePoint("trace", Trace("t", "jsonl", (late,))), random.Random(0))
    assert second.first_token_ns - second.sent_ns > (  # type: ignore[operator]
        alone.records[0].first_token_ns - alone.records[0].sent_ns  # type: ignore[operator]
    )


def test_a_long_run_of_refused_sessions_does_not_recurse() -> None:
    # Each refused first turn ends its session, which starts the next one at once: 3000 of
    # them in a row once went one stack frame deeper per session (RecursionError).
    plans = tuple(SessionPlan(f"s{i}", (Turn(None, 10, 700), Turn(None, 10, 10))) for i in range(3))
    spec = SessionsSpec(plans, "synthetic", Delay(0.5), 3000)
    run = run_point(
        engine(max_model_len=600), SessionsPoint("c=2", spec, concurrency=2), random.Random(0)
    )
    assert len(run.records) == 3000
    assert all(r.session_end == "failed" and r.turn == 1 for r in run.records)
    assert [r.id for r in run.records] == [f"c=2-{i}" for i in range(3000)]


def test_trace_block_ids_are_computed_ranges_apart_from_every_other_id() -> None:
    """A hash id's block is its own range of negative ids (any int, huge or negative, has
    one); a partial block is its start; text and fresh ids are non-negative."""
    ids = (-3, -2, -1, 0, 1, 2, 3, 10**30)
    blocks = [block_ids(h, 512) for h in ids]
    assert all(len(b) == 512 and max(b) < 0 for b in blocks)
    assert len(set().union(*blocks)) == 512 * len(ids)  # pairwise disjoint
    assert block_ids(7, 512) == block_ids(7, 512)
    trace = Trace(
        "t.jsonl",
        "mooncake",
        (TraceRequest(0.0, 1000, 4, (7, -5), 1), TraceRequest(1.0, 600, 4, (7, 8), 2)),
        block_tokens=512,
    )
    traffic = TraceTraffic(TracePoint("trace", trace))
    first = list(traffic.request("a", 0).token_ids or ())
    second = list(traffic.request("b", 1).token_ids or ())
    assert first == [*block_ids(7, 512), *block_ids(-5, 512)[:488]]
    assert second[:512] == first[:512]
    assert second[512:] == list(block_ids(8, 512)[:88])
    assert not hasattr(traffic, "_blocks")  # nothing cached per hash id
