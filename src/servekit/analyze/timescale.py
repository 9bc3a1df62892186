"""Convert a run measured against a time-scaled simulator to simulated time (core).

`servekit sim serve --time-scale S` runs the engine model S times as fast as real time
(S = 0.1: ten times faster). A load test against it measures wall-clock time; dividing
times by S and multiplying rates by S gives the figures of the simulated deployment. The
summary records the factor (`time_scale`) so the conversion is never silent; records stay
in wall-clock nanoseconds.
"""

from __future__ import annotations

from servekit.results.summary import ServerBlock, Summary, SummaryPoint


def _scale_point(point: SummaryPoint, time_scale: float) -> SummaryPoint:
    """Times (durations, latencies, TTFT, ITL, TPOT) / time_scale; rates x time_scale."""
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
