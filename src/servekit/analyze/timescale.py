"""Convert a run measured against a time-scaled simulator to simulated time (core).

`servekit sim serve --time-scale S` runs the engine model S times as fast as real time
(S = 0.1: ten times faster). A load test against it measures wall-clock time; dividing
times by S and multiplying rates by S gives the figures of the simulated deployment. The
summary records the factor (`time_scale`) so the conversion is never silent; records stay
in wall-clock nanoseconds.
"""

from __future__ import annotations

from servekit.results.summary import (
    ScheduleBlock,
    ServerBlock,
    SessionsBlock,
    Summary,
    SummaryPoint,
    TurnBlock,
)


def _scale_point(point: SummaryPoint, time_scale: float) -> SummaryPoint:
    """Times (durations, latencies, TTFT, ITL, TPOT, per-turn and per-session times, send
    lags and their bound) / time_scale; rates x time_scale; token counts (prefix cache) as
    measured."""
    slower, faster = 1 / time_scale, time_scale
    return SummaryPoint(
        concurrency=point.concurrency,
        rate_rps=point.rate_rps,
        completed=point.completed,
        failed=point.failed,
        errors=point.errors,
        duration_s=point.duration_s / time_scale,
        output_tokens=point.output_tokens,
        output_throughput_tok_s=point.output_throughput_tok_s * faster,
        request_throughput_rps=point.request_throughput_rps * faster,
        latency_s=point.latency_s.scaled(slower),
        latency_from_schedule_s=point.latency_from_schedule_s.scaled(slower),
        ttft_ms=point.ttft_ms.scaled(slower),
        ttfo_ms=point.ttfo_ms.scaled(slower),
        itl_ms=point.itl_ms.scaled(slower),
        chunk_gap_ms=point.chunk_gap_ms.scaled(slower),
        tpot_ms=point.tpot_ms.scaled(slower),
        per_stream_tok_s=point.per_stream_tok_s.scaled(faster),
        goodput_rps=None if point.goodput_rps is None else point.goodput_rps * faster,
        goodput_fraction=point.goodput_fraction,
        server=_scale_server(point.server, time_scale),
        client=point.client,
        prefix_cache=point.prefix_cache,
        turns=None if point.turns is None else [_scale_turn(t, slower) for t in point.turns],
        sessions=_scale_sessions(point.sessions, time_scale),
        schedule=_scale_schedule(point.schedule, slower),
        token_sources=point.token_sources,
    )


def _scale_turn(turn: TurnBlock, slower: float) -> TurnBlock:
    return turn.model_copy(
        update={"ttft_ms": turn.ttft_ms.scaled(slower), "itl_ms": turn.itl_ms.scaled(slower)}
    )


def _scale_sessions(sessions: SessionsBlock | None, time_scale: float) -> SessionsBlock | None:
    if sessions is None:
        return None
    per_s = sessions.turns_per_s
    return sessions.model_copy(
        update={
            "duration_s": sessions.duration_s.scaled(1 / time_scale),
            "turns_per_s": None if per_s is None else per_s * time_scale,
        }
    )


def _scale_schedule(schedule: ScheduleBlock | None, slower: float) -> ScheduleBlock | None:
    """Send lags and their bound alike, so the point's validity is the measured one."""
    if schedule is None:
        return None
    return schedule.model_copy(
        update={
            "lag_ms": schedule.lag_ms.scaled(slower),
            "max_lag_ms_p99": schedule.max_lag_ms_p99 * slower,
        }
    )


def _scale_server(server: ServerBlock, time_scale: float) -> ServerBlock:
    if server.samples is None:
        return server
    samples = [[s[0] / time_scale, *s[1:]] for s in server.samples]
    return server.model_copy(update={"samples": samples})


def to_simulated_time(summary: Summary, time_scale: float) -> Summary:
    """A copy of `summary` in simulated time: times / time_scale, rates x time_scale."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be positive, not {time_scale}")
    return summary.model_copy(
        update={
            "points": [_scale_point(p, time_scale) for p in summary.points],
            "time_scale": time_scale,
            "times": f"simulated: wall-clock times / {time_scale:g}, rates x {time_scale:g}",
        }
    )
