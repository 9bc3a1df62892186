"""Known answers for the traffic metrics (docs/metrics.md): prefix cache, turns, sessions,
schedule, from hand-built records and a fake /metrics text."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from servekit.analyze.compare import compare_runs
from servekit.analyze.point_columns import point_rows, traffic_headers, traffic_rows
from servekit.analyze.summarize import point_metrics, point_to_json, summary_document
from servekit.analyze.traffic import (
    ScheduleBound,
    prefix_cache_block,
    schedule_block,
    sessions_block,
    traffic_blocks,
    turn_blocks,
    with_traffic,
)
from servekit.bench.resummarize import rebuild_summary, write_run_info
from servekit.bench.scrape import parse_metrics, server_block
from servekit.bench.spec import BenchSpec, PointOutcome, PointSpec
from servekit.bench.store import RUN_INFO_FILE
from servekit.bench.summary import bench_summary
from servekit.records import RequestRecord
from servekit.results.run_info import load_run_info
from servekit.results.summary import ServerBlock, Summary, SummaryPoint, Target, Workload
from servekit.workload.sessions import AgentSpec, Delay, SessionPlan, SessionsSpec, Turn
from servekit.workload.traces import Trace, TraceRequest

MS = 1_000_000


def rec(
    rid: str,
    sent_ms: int,
    chunks_ms: tuple[int, ...],
    *,
    session: str | None = None,
    turn: int | None = None,
    end: str | None = None,
    prompt: int = 100,
    cached: int | None = None,
    tool_calls: int = 0,
    invalid: int = 0,
    error: str | None = None,
    scheduled_ms: int | None = None,
    point: str = "p",
) -> RequestRecord:
    times = tuple(t * MS for t in chunks_ms)
    return RequestRecord(
        id=rid,
        point=point,
        scheduled_ns=(sent_ms if scheduled_ms is None else scheduled_ms) * MS,
        sent_ns=sent_ms * MS,
        first_token_ns=times[0] if times and error is None else None,
        first_answer_ns=times[0] if times and error is None else None,
        end_ns=times[-1] if times else (sent_ms + 1) * MS,
        chunk_ns=times if error is None else (),
        chunk_tokens=tuple(1 for _ in times) if error is None else (),
        prompt_tokens=prompt,
        output_tokens=len(times) if error is None else 0,
        cached_tokens=cached,
        session=session,
        turn=turn,
        session_end=end,
        tool_calls=tool_calls,
        tool_args_invalid=invalid,
        error_kind=error,
        error=error,
    )


def two_turn_sessions() -> list[RequestRecord]:
    """Two sessions of two turns; turn 2 reuses turn 1's history (cached tokens)."""
    return [
        rec("a1", 0, (40, 50, 60), session="a", turn=1, prompt=600, cached=0),
        rec("b1", 10, (70, 80), session="b", turn=1, prompt=500, cached=0),
        rec("a2", 100, (120, 124), session="a", turn=2, prompt=1200, cached=512, end="completed"),
        rec("b2", 110, (150, 160), session="b", turn=2, prompt=1000, cached=512, end="completed"),
    ]


def test_turn_blocks_of_a_two_turn_session_set() -> None:
    """Each turn index gets its own TTFT/ITL distribution and prompt/cached means."""
    turns = turn_blocks(two_turn_sessions())
    assert turns is not None
    assert [t.turn for t in turns] == [1, 2]
    first, second = turns
    assert (first.requests, first.failed) == (2, 0)
    assert first.ttft_ms.mean == 50.0  # (40 + 60) / 2
    assert second.ttft_ms.mean == 30.0  # (20 + 40) / 2
    assert first.itl_ms.count == 3
    assert first.itl_ms.mean == 10.0
    assert second.itl_ms.mean == 7.0  # samples 4 and 10
    assert (first.prompt_tokens_mean, first.cached_tokens_mean) == (550.0, 0.0)
    assert (second.prompt_tokens_mean, second.cached_tokens_mean) == (1100.0, 512.0)


def test_sessions_block_of_a_two_turn_session_set() -> None:
    """Sessions, their ends, turns and durations (first send to last end) are exact."""
    block = sessions_block(two_turn_sessions(), duration_s=0.16)
    assert block is not None
    assert (block.sessions, block.completed, block.turn_limit, block.failed) == (2, 2, 0, 0)
    assert block.turns_completed_mean == 2.0
    assert block.duration_s.mean == 0.137  # a: 0 -> 124 ms, b: 10 -> 160 ms
    assert block.duration_s.count == 2
    assert block.turns_per_s == 25.0  # 4 successful turns in 0.16 s
    assert block.tool_calls is None
    assert block.tool_args_invalid_rate is None


def test_sessions_stopped_by_the_deadline_are_counted() -> None:
    """A session whose last record says "stopped" counts in `stopped`, and only there; the
    points table's sessions cell names it."""
    records = [
        *two_turn_sessions()[:3],
        rec("b2", 110, (150, 160), session="b", turn=2, prompt=1000, cached=512, end="stopped"),
    ]
    block = sessions_block(records, duration_s=0.16)
    assert block is not None
    assert (block.sessions, block.completed, block.failed, block.stopped) == (2, 1, 0, 1)
    metrics = point_metrics(records)
    point = point_to_json(metrics, concurrency=2, rate_rps=None, server=ServerBlock())
    blocks = traffic_blocks(records, ServerBlock(), duration_s=metrics.duration_s)
    headers = traffic_headers([with_traffic(point, blocks)])
    row = traffic_rows([with_traffic(point, blocks)])[0]
    assert row[headers.index("sessions completed")] == "1/2, 1 stopped"


def test_client_prefix_cache_sums_successful_requests_only() -> None:
    """The client's sums count successful requests; a failed one adds nothing."""
    records = [*two_turn_sessions(), rec("x", 0, (), prompt=900, cached=900, error="timeout")]
    block = prefix_cache_block(records, ServerBlock())
    assert block is not None
    assert (block.client_prompt_tokens, block.client_cached_tokens) == (3300, 1024)
    assert block.client_hit_rate == round(1024 / 3300, 6)
    assert block.server_queried_tokens is None
    assert block.server_hit_rate is None


def test_prefix_cache_none_vs_zero() -> None:
    """No source: no block; no cached counts reported: None, not 0; 0 queries: no rate."""
    plain = [rec("r", 0, (5, 6))]
    assert prefix_cache_block(plain, ServerBlock()) is None
    block = prefix_cache_block(plain, ServerBlock(prefix_cache_queries=0, prefix_cache_hits=0))
    assert block is not None
    assert (block.server_queried_tokens, block.server_hit_tokens) == (0, 0)
    assert block.server_hit_rate is None
    assert (block.client_prompt_tokens, block.client_cached_tokens) == (100, None)
    assert block.client_hit_rate is None
    implied = prefix_cache_block(plain, ServerBlock(), implied_hit_rate=0.25)
    assert implied is not None
    assert implied.implied_hit_rate == 0.25


FAKE_METRICS = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %d
vllm:prefix_cache_queries_total{engine="1",model_name="m"} %d
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %d
vllm:prefix_cache_hits_total{engine="1",model_name="m"} %d
"""


def test_server_prefix_cache_deltas_from_metrics_text() -> None:
    """Counters are summed over engines; the point's figures are the deltas around it."""
    before = parse_metrics(FAKE_METRICS % (1000, 200, 300, 0))
    after = parse_metrics(FAKE_METRICS % (3000, 500, 1300, 16))
    server = server_block(before, after, {})
    assert (server.prefix_cache_queries, server.prefix_cache_hits) == (2300, 1016)
    block = prefix_cache_block([rec("r", 0, (1,))], server)
    assert block is not None
    assert block.server_hit_rate == round(1016 / 2300, 6)
    restarted = server_block(after, before, {})  # the counters fell: the server restarted
    assert restarted.prefix_cache_queries is None
    assert restarted.prefix_cache_hits is None
    assert server_block(None, after, {}).prefix_cache_hits is None


def agent_sessions() -> list[RequestRecord]:
    """Three agent loops: one answers after a tool round, one hits the turn limit, one fails."""
    return [
        rec("a1", 0, (10, 20), session="a", turn=1, tool_calls=2, invalid=1),
        rec("a2", 30, (40, 50), session="a", turn=2, end="completed"),
        rec("b1", 0, (15,), session="b", turn=1, tool_calls=1),
        rec("b2", 20, (30,), session="b", turn=2, tool_calls=1, end="turn_limit"),
        rec("c1", 5, (), session="c", turn=1, error="timeout", end="failed"),
    ]


def test_agent_sessions_count_tool_calls_and_invalid_arguments() -> None:
    """Tool totals and rates appear for agent loops, found from the records' tool calls."""
    block = sessions_block(agent_sessions(), duration_s=0.05)
    assert block is not None
    assert (block.sessions, block.completed, block.turn_limit, block.failed) == (3, 1, 1, 1)
    assert block.turns_completed_mean == round(4 / 3, 4)
    assert (block.tool_calls, block.tool_args_invalid) == (4, 1)
    assert block.tool_calls_per_session == round(4 / 3, 4)
    assert block.tool_args_invalid_rate == 0.25
    assert block.turns_per_s == 80.0  # 4 successful turns in 0.05 s
    turns = turn_blocks(agent_sessions())
    assert turns is not None
    assert [(t.turn, t.requests, t.failed) for t in turns] == [
        (1, 3, 1),
        (2, 2, 0),
    ]


def test_agent_flag_decides_over_the_records() -> None:
    """An agent run whose model never called a tool still reports 0 calls and no rate; a
    run known not to be agent loops reports no tool figures."""
    records = two_turn_sessions()
    agent = sessions_block(records, duration_s=1.0, agent=True)
    assert agent is not None
    assert (agent.tool_calls, agent.tool_args_invalid, agent.tool_args_invalid_rate) == (0, 0, None)
    plain = sessions_block(agent_sessions(), duration_s=1.0, agent=False)
    assert plain is not None
    assert plain.tool_calls is None


def test_no_sessions_no_blocks() -> None:
    """Single-turn records give no turn or session blocks."""
    records = [rec("r1", 0, (5, 6)), rec("r2", 1, (7,))]
    assert turn_blocks(records) is None
    assert sessions_block(records, duration_s=1.0) is None


def scheduled() -> list[RequestRecord]:
    """Four sends scheduled 0, 50, 100, 150 ms, sent 1, 2, 3 and 20 ms late."""
    return [
        rec(f"t{i}", at + late, (at + late + 5,), scheduled_ms=at)
        for i, (at, late) in enumerate([(0, 1), (50, 2), (100, 3), (150, 20)])
    ]


def test_schedule_lag_against_its_bound() -> None:
    """Lag is sent - scheduled; the point is valid when p99 is within the bound and every
    planned send was made."""
    ok = schedule_block(scheduled(), ScheduleBound(planned=4, max_lag_ms_p99=25.0))
    assert (ok.planned, ok.sent, ok.valid) == (4, 4, True)
    assert ok.lag_ms.mean == 6.5
    assert ok.lag_ms.p99 == 19.49  # linear between 3 and 20 at rank 2.97
    late = schedule_block(scheduled(), ScheduleBound(planned=4, max_lag_ms_p99=10.0))
    assert late.valid is False
    short = schedule_block(scheduled()[:3], ScheduleBound(planned=4, max_lag_ms_p99=25.0))
    assert (short.sent, short.valid) == (3, False)


def test_an_unkept_schedule_makes_the_point_invalid() -> None:
    """with_traffic marks the client block invalid and says why, once."""
    records = scheduled()
    metrics = point_metrics(records)
    point = point_to_json(metrics, concurrency=None, rate_rps=None)
    blocks = traffic_blocks(
        records,
        ServerBlock(),
        duration_s=metrics.duration_s,
        schedule=ScheduleBound(planned=4, max_lag_ms_p99=10.0),
    )
    marked = with_traffic(with_traffic(point, blocks), blocks)
    assert marked.client.valid is False
    assert marked.client.warnings == [
        "send lag p99 19.490 ms is over the 10 ms allowed (--max-schedule-lag-ms): "
        "the client could not keep the trace's times"
    ]
    assert marked.schedule is not None
    assert marked.schedule.sent == 4
    assert marked.sessions is None
    assert marked.turns is None
    assert marked.prefix_cache is None
    kept = with_traffic(point, traffic_blocks(records, ServerBlock(), duration_s=1.0))
    assert kept.client.valid is True
    assert kept.schedule is None


def test_bench_summary_and_resummarize_build_the_same_blocks(tmp_path: Path) -> None:
    """A trace point and an agent point: bench's summary fills the blocks and the workload's
    trace and sessions, and --resummarize rebuilds the same points from run.json."""
    trace = Trace(
        file="t.jsonl",
        format="mooncake",
        requests=tuple(TraceRequest(i * 0.05, 600, 4, (1, 2), i + 1) for i in range(4)),
        block_tokens=512,
    )
    agent = AgentSpec(tools=(), tool_latency=Delay(0.5, "exponential"), tool_result="ok",
                      max_turns=2)  # fmt: skip
    plans = (SessionPlan("s", (Turn("hi", 4),)),)
    sessions = SessionsSpec(plans, "synthetic", Delay(1.0), 3, agent)
    spec = BenchSpec(base_url="http://127.0.0.1:1", model="m", trace=trace, sessions=sessions,
                     max_schedule_lag_ms=10.0)  # fmt: skip
    replay = PointSpec("trace", rate_rps=20.0, schedule=(0.0, 0.05, 0.1, 0.15), requests=4)
    loops = PointSpec("c=2", concurrency=2)
    server = ServerBlock(prefix_cache_queries=2400, prefix_cache_hits=1024)
    outcomes = [
        PointOutcome(replay, [dataclasses.replace(r, point="trace") for r in scheduled()],
                     server, []),
        PointOutcome(loops, [dataclasses.replace(r, point="c=2") for r in agent_sessions()],
                     ServerBlock(), []),
    ]  # fmt: skip
    summary = bench_summary(
        spec, outcomes, version="0", started_at="now", server_version=None, profile=None
    )
    assert summary.workload.trace is not None
    assert (summary.workload.trace.requests, summary.workload.trace.block_tokens) == (4, 512)
    # every request after the first shares its full first block: 3 x 512 of 4 x 600 tokens
    assert (
        summary.workload.trace.implied_hit_rate == 0.74875
    )  # 3 x 599 of 2400: all but the last token
    info = summary.workload.sessions
    assert info is not None
    assert (info.source, info.sessions, info.turns_max, info.agent) == ("synthetic", 3, 2, True)
    assert (info.think_time, info.tool_latency) == ("1", "0.5:exponential")
    first, second = summary.points
    assert first.schedule is not None
    assert first.schedule.valid is False
    assert first.prefix_cache is not None
    assert first.prefix_cache.server_hit_rate == round(1024 / 2400, 6)
    assert first.prefix_cache.implied_hit_rate == 0.74875  # 3 x 599 of 2400: all but the last token
    assert second.prefix_cache is None
    assert first.sessions is None
    assert first.client.valid is False
    assert second.schedule is None
    assert second.sessions is not None
    assert second.sessions.tool_calls == 4
    assert second.turns is not None
    write_run_info(tmp_path, summary, [replay, loops], outcomes, max_schedule_lag_ms=10.0)
    run = load_run_info(json.loads((tmp_path / RUN_INFO_FILE).read_text()))
    assert run.points[0].schedule_planned == 4
    assert run.points[1].schedule_planned is None
    records = [r for o in outcomes for r in o.records]
    assert rebuild_summary(run, records).points == summary.points


def test_compare_pairs_two_replays_and_compares_their_traffic_figures() -> None:
    """A replay point of each run lines up as `trace` (whatever rate each names) and the
    traffic figures are compared side by side; a plain point gets none of them."""

    def replay(rate: float | None, hits: int, late_ms: int) -> SummaryPoint:
        records = [
            rec(f"t{i}", at + late_ms, (at + late_ms + 5,), scheduled_ms=at, point="trace")
            for i, at in enumerate((0, 50, 100, 150))
        ]
        metrics = point_metrics(records)
        server = ServerBlock(prefix_cache_queries=2000, prefix_cache_hits=hits)
        point = point_to_json(metrics, concurrency=None, rate_rps=rate, server=server)
        bound = ScheduleBound(planned=4, max_lag_ms_p99=10.0)
        blocks = traffic_blocks(records, server, duration_s=metrics.duration_s, schedule=bound)
        return with_traffic(point, blocks)

    plain = point_to_json(point_metrics([rec("p", 0, (5, 6))]), concurrency=1, rate_rps=None)
    run_a = summary_document(servekit_version="0", started_at="now",
                             target=Target(url=None, model="m", server_version=None, profile=None),
                             workload=Workload(input_len=1, output_len=1, temperature=0.0,
                                               requests_per_point=4, seed=0),
                             points=[plain, replay(20.0, 1000, 1)])  # fmt: skip
    run_b = run_a.model_copy(update={"points": [plain, replay(None, 900, 2)]})
    doc = compare_runs(run_a, run_b)
    assert [(r.load, r.load_kind, r.load_value) for r in doc.points] == [
        ("c=1", "concurrency", 1.0),
        ("trace", "trace", 4.0),
    ]
    assert not any(key.startswith(("prefix_cache", "schedule")) for key in doc.points[0].deltas)
    traffic = doc.points[1].deltas
    hit = traffic["prefix_cache.server_hit_rate"]
    assert (hit.a, hit.b, hit.delta_pct, hit.verdict) == (0.5, 0.45, -10.0, "worse")
    lag = traffic["schedule.lag_ms.p99"]
    assert (lag.a, lag.b, lag.delta_pct, lag.verdict) == (1.0, 2.0, 100.0, "worse")
    assert "sessions.completed_fraction" not in traffic


def test_point_columns_name_a_replay_and_show_traffic_where_present() -> None:
    """A replay point is `trace` in every view; the traffic table has only filled columns."""
    records = scheduled()
    metrics = point_metrics(records)
    point = point_to_json(metrics, concurrency=None, rate_rps=10.9, server=ServerBlock())
    bound = ScheduleBound(planned=4, max_lag_ms_p99=25.0)
    replay = with_traffic(
        point, traffic_blocks(records, ServerBlock(), duration_s=metrics.duration_s, schedule=bound)
    )
    assert point_rows([replay], "terminal")[0][0] == "trace"
    assert traffic_headers([replay]) == ["load", "send lag p99 ms", "sent/planned"]
    assert traffic_rows([replay]) == [["trace", "19.490", "4/4"]]
    plain = point_to_json(point_metrics([rec("p", 0, (5, 6))]), concurrency=1, rate_rps=None)
    assert traffic_headers([plain]) == []
    assert traffic_rows([plain]) == []


def session_run(records: list[RequestRecord], hits: int) -> Summary:
    """A one-point run (c=2) of these session records, the server finding `hits` of 1000."""
    metrics = point_metrics(records)
    server = ServerBlock(prefix_cache_queries=1000, prefix_cache_hits=hits)
    point = point_to_json(metrics, concurrency=2, rate_rps=None, server=server)
    point = with_traffic(point, traffic_blocks(records, server, duration_s=metrics.duration_s))
    return summary_document(servekit_version="0", started_at="now",
                            target=Target(url=None, model="m", server_version=None, profile=None),
                            workload=Workload(input_len=1, output_len=1, temperature=0.0,
                                              requests_per_point=4, seed=0),
                            points=[point])  # fmt: skip


def with_invalid_rate(run: Summary, rate: float) -> Summary:
    point = run.points[0]
    assert point.sessions is not None
    sessions = point.sessions.model_copy(update={"tool_args_invalid_rate": rate})
    return run.model_copy(update={"points": [point.model_copy(update={"sessions": sessions})]})


def test_compare_judges_shares_by_percentage_points_even_from_zero() -> None:
    """Caching off (0 hits) against on, and invalid tool arguments 0 -> 30%, get verdicts
    (a relative change from 0 has none); a share that moved by 1 point or less is noise,
    however large its relative change; a time still moves by the 2% rule."""
    off = with_invalid_rate(session_run(two_turn_sessions(), 0), 0.0)
    on = with_invalid_rate(session_run(two_turn_sessions(), 300), 0.3)
    deltas = compare_runs(off, on).points[0].deltas
    hit = deltas["prefix_cache.server_hit_rate"]
    assert (hit.a, hit.b, hit.delta_pp, hit.delta_pct, hit.verdict) == (0.0, 0.3, 30.0, None,
                                                                        "better")  # fmt: skip
    invalid = deltas["sessions.tool_args_invalid_rate"]
    assert (invalid.delta_pp, invalid.verdict) == (30.0, "worse")
    assert deltas["sessions.turns_per_s"].delta_pp is None  # a count: relative
    small = compare_runs(session_run(two_turn_sessions(), 50), session_run(two_turn_sessions(), 58))
    hit = small.points[0].deltas["prefix_cache.server_hit_rate"]
    assert (hit.delta_pp, hit.delta_pct, hit.verdict) == (0.8, 16.0, "within noise")
    assert "delta_pp" not in small.points[0].deltas["turns.first.ttft_ms.mean"].as_json()


def test_last_turn_ttft_compares_the_highest_turn_both_runs_reached() -> None:
    """A reaches turn 3, B turn 2: the last-turn figure is turn 2 of both, and says so; the
    report's traffic table names the turn every point reached."""
    longer = [
        *two_turn_sessions()[:3],
        rec("b2", 110, (150, 160), session="b", turn=2, prompt=1000, cached=512),
        rec("b3", 200, (290, 300), session="b", turn=3, prompt=1500, cached=1024, end="completed"),
    ]
    run_a, run_b = session_run(longer, 0), session_run(two_turn_sessions(), 0)
    last = compare_runs(run_a, run_b).points[0].deltas["turns.last.ttft_ms.mean"]
    assert (last.turn, last.a, last.b, last.verdict) == (2, 30.0, 30.0, "within noise")
    points = [run_a.points[0], run_b.points[0]]
    assert "turn 2 TTFT ms" in traffic_headers(points)
    assert "turn 3 TTFT ms" in traffic_headers(points[:1])
    assert traffic_rows(points[:1])[0][traffic_headers(points[:1]).index("turn 3 TTFT ms")] == (
        "90.0"
    )
