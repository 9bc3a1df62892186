"""Convert a run measured against a time-scaled simulator to simulated time (core).

`servekit sim serve --time-scale S` runs the engine model S times as fast as real time
(S = 0.1: ten times faster). A load test against it measures wall-clock time; dividing
times by S and multiplying rates by S gives the figures of the simulated deployment. The
summary records the factor (`time_scale`) so the conversion is never silent; records stay
in wall-clock nanoseconds.
"""

from __future__ import annotations

import copy
from typing import Any

TIMES = ("latency_s", "latency_from_schedule_s", "ttft_ms", "ttfo_ms", "itl_ms", "chunk_gap_ms",
         "tpot_ms")  # fmt: skip
RATES = ("per_stream_tok_s",)
STATS = ("mean", "p50", "p90", "p99")


def _scale_distribution(dist: Any, factor: float) -> Any:
    if not isinstance(dist, dict):
        return dist
    out = dict(dist)
    for stat in STATS:
        if isinstance(out.get(stat), int | float):
            out[stat] = out[stat] * factor
    if isinstance(out.get("ci95"), dict):
        out["ci95"] = {k: [v[0] * factor, v[1] * factor] for k, v in out["ci95"].items()}
    return out


def to_simulated_time(summary: dict[str, Any], time_scale: float) -> dict[str, Any]:
    """A copy of `summary` in simulated time: times / time_scale, rates x time_scale."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be positive, not {time_scale}")
    doc = copy.deepcopy(summary)
    for point in doc.get("points", []):
        point["duration_s"] = point.get("duration_s", 0.0) / time_scale
        for key in ("output_throughput_tok_s", "request_throughput_rps", "goodput_rps"):
            if isinstance(point.get(key), int | float):
                point[key] = point[key] * time_scale
        for key in TIMES:
            point[key] = _scale_distribution(point.get(key), 1 / time_scale)
        for key in RATES:
            point[key] = _scale_distribution(point.get(key), time_scale)
        server = point.get("server") or {}
        if isinstance(server.get("samples"), list):
            server["samples"] = [[s[0] / time_scale, *s[1:]] for s in server["samples"]]
    doc["time_scale"] = time_scale
    doc["times"] = f"simulated: wall-clock times / {time_scale:g}, rates x {time_scale:g}"
    return doc
