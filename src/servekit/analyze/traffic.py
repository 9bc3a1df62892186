"""Per-point figures of real traffic (core): prefix-cache reuse, turns, sessions, schedule.

Computed from a point's records and its server block exactly as docs/metrics.md defines
them, for a bench run, its `--resummarize` and a simulated run alike:

- prefix cache: the server's counter deltas (tokens queried, tokens hit) and their ratio;
  the client's sums of usage `prompt_tokens` and `cached_tokens` over successful requests;
  what a replayed trace implies.
- turns: per turn index of the records that belong to a session, TTFT and ITL
  distributions and the mean prompt and cached tokens of the successful requests.
- sessions: records grouped by session; how each session ended, its duration (first send
  to last end), turns per second of the point, and for agent loops tool calls and the
  share whose arguments were invalid.
- schedule (a point sent at explicit offsets): sends planned and made, and the send lag
  (sent - scheduled) against the stated bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servekit.analyze.summarize import NS_PER_MS, NS_PER_S, distribution, sample_arrays
from servekit.records import RequestRecord
from servekit.results.summary import (
    PrefixCacheBlock,
    ScheduleBlock,
    ServerBlock,
    SessionsBlock,
    SummaryPoint,
    TurnBlock,
)

RATE_DIGITS = 6


@dataclass(frozen=True, slots=True)
class ScheduleBound:
    """What a point's explicit schedule asked for: how many sends, and the p99 lag bound."""

    planned: int
    max_lag_ms_p99: float


@dataclass(frozen=True, slots=True)
class TrafficBlocks:
    """The traffic blocks of one summary point (each None where the point has none)."""

    prefix_cache: PrefixCacheBlock | None = None
    turns: list[TurnBlock] | None = None
    sessions: SessionsBlock | None = None
    schedule: ScheduleBlock | None = None


def _ratio(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    return round(part / whole, RATE_DIGITS)


def _mean(values: Sequence[int]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def prefix_cache_block(
    records: Sequence[RequestRecord],
    server: ServerBlock,
    *,
    implied_hit_rate: float | None = None,
) -> PrefixCacheBlock | None:
    """The point's prefix-cache reuse; None when no source said anything about it (no
    server counters, no response with cached tokens, no trace)."""
    ok = [r for r in records if r.ok]
    reported = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    queries, hits = server.prefix_cache_queries, server.prefix_cache_hits
    if queries is None and hits is None and not reported and implied_hit_rate is None:
        return None
    prompt = sum(r.prompt_tokens for r in ok)
    cached = sum(reported) if reported else None
    return PrefixCacheBlock(
        server_queried_tokens=queries,
        server_hit_tokens=hits,
        server_hit_rate=_ratio(hits, queries),
        client_prompt_tokens=prompt,
        client_cached_tokens=cached,
        client_hit_rate=_ratio(cached, prompt),
        implied_hit_rate=None if implied_hit_rate is None else round(implied_hit_rate, RATE_DIGITS),
    )


def turn_blocks(records: Sequence[RequestRecord], *, ci: bool = True) -> list[TurnBlock] | None:
    """One block per turn index of the records that belong to a session, lowest first;
    None when no record belongs to one."""
    by_turn: dict[int, list[RequestRecord]] = {}
    for record in records:
        if record.session is not None and record.turn is not None:
            by_turn.setdefault(record.turn, []).append(record)
    if not by_turn:
        return None
    blocks = []
    for turn in sorted(by_turn):
        recs = by_turn[turn]
        ok = [r for r in recs if r.ok]
        x = sample_arrays(ok)
        cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
        blocks.append(
            TurnBlock(
                turn=turn,
                requests=len(recs),
                failed=len(recs) - len(ok),
                ttft_ms=distribution(x.ttft_ms, ci=ci).to_block(),
                itl_ms=distribution(x.itl_ms, ci=ci, clusters=x.itl_sizes).to_block(),
                prompt_tokens_mean=_mean([r.prompt_tokens for r in ok]),
                cached_tokens_mean=_mean(cached),
            )
        )
    return blocks


def sessions_block(
    records: Sequence[RequestRecord],
    *,
    duration_s: float,
    agent: bool | None = None,
    ci: bool = True,
) -> SessionsBlock | None:
    """The point's sessions; None when no record belongs to one.

    `duration_s` is the point's window (first send to last end). `agent` says whether the
    sessions are agent loops (their tool figures are filled); None decides from the records:
    agent loops when any response made a tool call.
    """
    by_session: dict[str, list[RequestRecord]] = {}
    for record in records:
        if record.session is not None:
            by_session.setdefault(record.session, []).append(record)
    if not by_session:
        return None
    ends = [r.session_end for recs in by_session.values() for r in recs if r.session_end]
    turns_ok = [sum(1 for r in recs if r.ok) for recs in by_session.values()]
    durations = [
        (max(r.end_ns for r in recs) - min(r.sent_ns for r in recs)) / NS_PER_S
        for recs in by_session.values()
    ]
    session_records = [r for recs in by_session.values() for r in recs]
    if agent is None:
        agent = any(r.tool_calls for r in session_records)
    calls = sum(r.tool_calls for r in session_records) if agent else None
    invalid = sum(r.tool_args_invalid for r in session_records) if agent else None
    return SessionsBlock(
        sessions=len(by_session),
        completed=ends.count("completed"),
        turn_limit=ends.count("turn_limit"),
        failed=ends.count("failed"),
        stopped=ends.count("stopped"),
        turns_completed_mean=_mean(turns_ok),
        duration_s=distribution(durations, ci=ci).to_block(),
        turns_per_s=round(sum(turns_ok) / duration_s, 4) if duration_s > 0 else None,
        tool_calls=calls,
        tool_calls_per_session=None if calls is None else round(calls / len(by_session), 4),
        tool_args_invalid=invalid,
        tool_args_invalid_rate=_ratio(invalid, calls),
    )


def schedule_block(
    records: Sequence[RequestRecord], bound: ScheduleBound, *, ci: bool = True
) -> ScheduleBlock:
    """How closely the point's sends kept its schedule; valid when every planned send was
    made and the p99 lag is within the bound."""
    lags = [(r.sent_ns - r.scheduled_ns) / NS_PER_MS for r in records]
    lag = distribution(lags, ci=ci)
    within = lag.p99 is None or lag.p99 <= bound.max_lag_ms_p99
    return ScheduleBlock(
        planned=bound.planned,
        sent=len(records),
        lag_ms=lag.to_block(),
        max_lag_ms_p99=bound.max_lag_ms_p99,
        valid=within and len(records) == bound.planned,
    )


def schedule_warning(block: ScheduleBlock) -> str | None:
    """Why a point's schedule makes it invalid, in one line, or None."""
    if block.valid:
        return None
    if block.sent != block.planned:
        return f"sent {block.sent} of the {block.planned} requests the schedule planned"
    return (
        f"send lag p99 {block.lag_ms.p99:.3f} ms is over the {block.max_lag_ms_p99:g} ms "
        "allowed (--max-schedule-lag-ms): the client could not keep the trace's times"
    )


def traffic_blocks(
    records: Sequence[RequestRecord],
    server: ServerBlock,
    *,
    duration_s: float,
    agent: bool | None = None,
    schedule: ScheduleBound | None = None,
    implied_hit_rate: float | None = None,
    ci: bool = True,
) -> TrafficBlocks:
    """Every traffic block of one point from its records and its server block."""
    return TrafficBlocks(
        prefix_cache=prefix_cache_block(records, server, implied_hit_rate=implied_hit_rate),
        turns=turn_blocks(records, ci=ci),
        sessions=sessions_block(records, duration_s=duration_s, agent=agent, ci=ci),
        schedule=None if schedule is None else schedule_block(records, schedule, ci=ci),
    )


def with_traffic(point: SummaryPoint, blocks: TrafficBlocks) -> SummaryPoint:
    """The point with its traffic blocks; a schedule it did not keep makes it invalid (its
    client block says why)."""
    client = point.client
    why = None if blocks.schedule is None else schedule_warning(blocks.schedule)
    if why is not None and why not in client.warnings:
        client = client.model_copy(update={"valid": False, "warnings": [*client.warnings, why]})
    return point.model_copy(
        update={
            "prefix_cache": blocks.prefix_cache,
            "turns": blocks.turns,
            "sessions": blocks.sessions,
            "schedule": blocks.schedule,
            "client": client,
        }
    )
