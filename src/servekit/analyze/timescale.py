"""Convert a run measured against a time-scaled simulator to simulated time (core).

`servekit sim serve --time-scale S` runs the engine model S times as fast as real time
(S = 0.1: ten times faster). A load test against it measures wall-clock time; dividing
times by S and multiplying rates by S gives the figures of the simulated deployment. The
summary records the factor (`time_scale`) so the conversion is never silent; records stay
in wall-clock nanoseconds.
"""

from __future__ import annotations

from servekit.results.summary import ServerBlock, Summary, SummaryPoint

TIMES = ("latency_s", "latency_from_schedule_s", "ttft_ms", "ttfo_ms", "itl_ms", "chunk_gap_ms",
         "tpot_ms")  # fmt: skip
RATES = ("per_stream_tok_s",)


def _scale_point(point: SummaryPoint, time_scale: float) -> SummaryPoint:
    def rate(value: float | None) -> float | None:
        return None if value is None else value * time_scale

    update: dict[str, object] = {
        "duration_s": point.duration_s / time_scale,
        "output_throughput_tok_s": point.output_throughput_tok_s * time_scale,
        "request_throughput_rps": point.request_throughput_rps * time_scale,
        "goodput_rps": rate(point.goodput_rps),
        "server": _scale_server(point.server, time_scale),
    }
    update |= {key: point.distribution(key).scaled(1 / time_scale) for key in TIMES}
    update |= {key: point.distribution(key).scaled(time_scale) for key in RATES}
    return point.model_copy(update=update)


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
