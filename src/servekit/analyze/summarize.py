"""Per-point metrics exactly as DESIGN.md section 5 defines them (core).

- TTFT: first chunk with any generated token - t0; TTFO: first answer token - t0.
- ITL: a chunk of k tokens arriving dt after the previous chunk gives k samples of dt/k;
  chunk gaps (dt itself) are a separate metric.
- TPOT = (last token time - first token time) / (output tokens - 1); per-stream = 1 / TPOT.
- E2E latency = end - t0. Output throughput = output tokens of the point's requests / the
  point's window (first send to last end).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from servekit.records import RequestRecord

NS_PER_S = 1e9
NS_PER_MS = 1e6


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and percentiles of one metric (NaN-free; None when there are no samples)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    count: int

    def to_json(self) -> dict[str, float | int | None]:
        """JSON form with figures rounded to 4 decimals."""
        return {
            "mean": _round(self.mean),
            "p50": _round(self.p50),
            "p90": _round(self.p90),
            "p99": _round(self.p99),
            "count": self.count,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def distribution(samples: Sequence[float] | np.ndarray) -> Distribution:
    """Return mean, p50, p90 and p99 (linear interpolation) of samples."""
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        return Distribution(None, None, None, None, 0)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return Distribution(float(values.mean()), float(p50), float(p90), float(p99), int(values.size))


@dataclass(frozen=True, slots=True)
class PointMetrics:
    """Client-side metrics of one load point."""

    completed: int
    failed: int
    errors: dict[str, int]
    duration_s: float
    output_tokens: int
    output_throughput_tok_s: float
    request_throughput_rps: float
    latency_s: Distribution
    latency_from_schedule_s: Distribution
    ttft_ms: Distribution
    ttfo_ms: Distribution
    itl_ms: Distribution
    chunk_gap_ms: Distribution
    tpot_ms: Distribution
    per_stream_tok_s: Distribution


def point_metrics(records: Iterable[RequestRecord]) -> PointMetrics:
    """Compute one point's metrics from its records."""
    recs = list(records)
    ok = [r for r in recs if r.ok]
    errors = Counter(r.error_kind for r in recs if not r.ok and r.error_kind)
    window_ns = (max(r.end_ns for r in recs) - min(r.sent_ns for r in recs)) if recs else 0
    window_s = window_ns / NS_PER_S
    latency = [(r.end_ns - r.sent_ns) / NS_PER_S for r in ok]
    from_schedule = [(r.end_ns - r.scheduled_ns) / NS_PER_S for r in ok]
    ttft = [(r.first_token_ns - r.sent_ns) / NS_PER_MS for r in ok if r.first_token_ns]
    ttfo = [(r.first_answer_ns - r.sent_ns) / NS_PER_MS for r in ok if r.first_answer_ns]
    itl: list[float] = []
    gaps: list[float] = []
    tpot: list[float] = []
    for r in ok:
        times, tokens = r.chunk_ns, r.chunk_tokens
        for i in range(1, len(times)):
            dt_ms = (times[i] - times[i - 1]) / NS_PER_MS
            gaps.append(dt_ms)
            k = max(tokens[i], 1)
            itl.extend([dt_ms / k] * k)
        if r.output_tokens > 1 and len(times) > 1:
            tpot.append((times[-1] - times[0]) / NS_PER_MS / (r.output_tokens - 1))
    output_tokens = sum(r.output_tokens for r in ok)
    per_stream = [1000.0 / t for t in tpot if t > 0]
    return PointMetrics(
        completed=len(ok),
        failed=len(recs) - len(ok),
        errors=dict(errors),
        duration_s=window_s,
        output_tokens=output_tokens,
        output_throughput_tok_s=output_tokens / window_s if window_s > 0 else 0.0,
        request_throughput_rps=len(ok) / window_s if window_s > 0 else 0.0,
        latency_s=distribution(latency),
        latency_from_schedule_s=distribution(from_schedule),
        ttft_ms=distribution(ttft),
        ttfo_ms=distribution(ttfo),
        itl_ms=distribution(itl),
        chunk_gap_ms=distribution(gaps),
        tpot_ms=distribution(tpot),
        per_stream_tok_s=distribution(per_stream),
    )


def point_to_json(
    metrics: PointMetrics,
    *,
    concurrency: int | None,
    rate_rps: float | None,
    server: dict[str, float | int | None] | None = None,
    client: dict[str, object] | None = None,
) -> dict[str, object]:
    """Return one entry of summary.json's `points` (DESIGN.md section 4)."""
    return {
        "concurrency": concurrency,
        "rate_rps": rate_rps,
        "completed": metrics.completed,
        "failed": metrics.failed,
        "errors": metrics.errors,
        "duration_s": round(metrics.duration_s, 4),
        "output_tokens": metrics.output_tokens,
        "output_throughput_tok_s": round(metrics.output_throughput_tok_s, 3),
        "request_throughput_rps": round(metrics.request_throughput_rps, 4),
        "latency_s": metrics.latency_s.to_json(),
        "latency_from_schedule_s": metrics.latency_from_schedule_s.to_json(),
        "ttft_ms": metrics.ttft_ms.to_json(),
        "ttfo_ms": metrics.ttfo_ms.to_json(),
        "itl_ms": metrics.itl_ms.to_json(),
        "chunk_gap_ms": metrics.chunk_gap_ms.to_json(),
        "tpot_ms": metrics.tpot_ms.to_json(),
        "per_stream_tok_s": metrics.per_stream_tok_s.to_json(),
        "server": server or {},
        "client": client or {"valid": True, "warnings": []},
    }


def summary_document(
    *,
    servekit_version: str,
    started_at: str,
    target: dict[str, object],
    workload: dict[str, object],
    points: list[dict[str, object]],
) -> dict[str, object]:
    """Return the whole summary.json document of a run (DESIGN.md section 4)."""
    return {
        "servekit_version": servekit_version,
        "started_at": started_at,
        "target": target,
        "workload": workload,
        "points": points,
    }
