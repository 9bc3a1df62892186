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

from servekit.errors import UsageError
from servekit.records import RequestRecord

NS_PER_S = 1e9
NS_PER_MS = 1e6


BOOTSTRAP_RESAMPLES = 200
BOOTSTRAP_BLOCK = 20
STATS = ("mean", "p50", "p90", "p99")


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and percentiles of one metric (NaN-free; None when there are no samples).

    `ci95` holds a 95% bootstrap confidence interval (percentile method) for each statistic.
    """

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    count: int
    ci95: dict[str, tuple[float, float]] | None = None

    def to_json(self) -> dict[str, object]:
        """JSON form with figures rounded to 4 decimals."""
        return {
            "mean": _round(self.mean),
            "p50": _round(self.p50),
            "p90": _round(self.p90),
            "p99": _round(self.p99),
            "count": self.count,
            "ci95": None
            if self.ci95 is None
            else {k: [round(lo, 4), round(hi, 4)] for k, (lo, hi) in self.ci95.items()},
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def distribution(samples: Sequence[float] | np.ndarray, *, ci: bool = True) -> Distribution:
    """Return mean, p50, p90 and p99 (linear interpolation) of samples, with bootstrap CIs.

    The bootstrap draws BOOTSTRAP_RESAMPLES resamples with a fixed seed, so the same
    samples always give the same intervals.
    """
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        return Distribution(None, None, None, None, 0)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    intervals = _bootstrap(values) if ci and values.size > 1 else None
    return Distribution(
        float(values.mean()), float(p50), float(p90), float(p99), int(values.size), intervals
    )


def _bootstrap(values: np.ndarray) -> dict[str, tuple[float, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(BOOTSTRAP_RESAMPLES // BOOTSTRAP_BLOCK):
        block = values[rng.integers(0, values.size, size=(BOOTSTRAP_BLOCK, values.size))]
        pct = np.percentile(block, [50, 90, 99], axis=1)
        rows.append(np.vstack([block.mean(axis=1), pct]))
    table = np.hstack(rows)  # 4 statistics x resamples
    lo, hi = np.percentile(table, [2.5, 97.5], axis=1)
    return {name: (float(lo[i]), float(hi[i])) for i, name in enumerate(STATS)}


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
    goodput_rps: float | None = None
    goodput_fraction: float | None = None


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives; a request meets them when every set bound holds."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_s: float | None = None

    def met_by(self, record: RequestRecord) -> bool:
        """True when a successful record meets every bound that is set."""
        if not record.ok:
            return False
        if self.ttft_ms is not None:
            if record.first_token_ns is None:
                return False
            if (record.first_token_ns - record.sent_ns) / NS_PER_MS > self.ttft_ms:
                return False
        if self.e2e_s is not None and (record.end_ns - record.sent_ns) / NS_PER_S > self.e2e_s:
            return False
        if self.tpot_ms is not None and record.output_tokens > 1 and len(record.chunk_ns) > 1:
            tpot = (
                (record.chunk_ns[-1] - record.chunk_ns[0]) / NS_PER_MS / (record.output_tokens - 1)
            )
            if tpot > self.tpot_ms:
                return False
        return True


@dataclass(frozen=True, slots=True)
class Samples:
    """The per-request and per-token samples of successful requests (DESIGN.md section 5)."""

    latency_s: list[float]
    from_schedule_s: list[float]
    ttft_ms: list[float]
    ttfo_ms: list[float]
    itl_ms: list[float]  # a chunk of k tokens after dt gives k samples of dt/k
    chunk_gap_ms: list[float]
    tpot_ms: list[float]


def samples(ok: Iterable[RequestRecord]) -> Samples:
    """Collect the samples of successful records (failed ones must be filtered out first)."""
    out = Samples([], [], [], [], [], [], [])
    for r in ok:
        out.latency_s.append((r.end_ns - r.sent_ns) / NS_PER_S)
        out.from_schedule_s.append((r.end_ns - r.scheduled_ns) / NS_PER_S)
        if r.first_token_ns:
            out.ttft_ms.append((r.first_token_ns - r.sent_ns) / NS_PER_MS)
        if r.first_answer_ns:
            out.ttfo_ms.append((r.first_answer_ns - r.sent_ns) / NS_PER_MS)
        times, tokens = r.chunk_ns, r.chunk_tokens
        for i in range(1, len(times)):
            dt_ms = (times[i] - times[i - 1]) / NS_PER_MS
            out.chunk_gap_ms.append(dt_ms)
            k = max(tokens[i], 1)
            out.itl_ms.extend([dt_ms / k] * k)
        if r.output_tokens > 1 and len(times) > 1:
            out.tpot_ms.append((times[-1] - times[0]) / NS_PER_MS / (r.output_tokens - 1))
    return out


def point_metrics(
    records: Iterable[RequestRecord], *, slo: Slo | None = None, ci: bool = True
) -> PointMetrics:
    """Compute one point's metrics from its records (goodput when an SLO is given)."""
    recs = list(records)
    ok = [r for r in recs if r.ok]
    errors = Counter(r.error_kind for r in recs if not r.ok and r.error_kind)
    window_ns = (max(r.end_ns for r in recs) - min(r.sent_ns for r in recs)) if recs else 0
    window_s = window_ns / NS_PER_S
    x = samples(ok)
    output_tokens = sum(r.output_tokens for r in ok)
    good = sum(1 for r in recs if slo.met_by(r)) if slo else 0
    per_stream = [1000.0 / t for t in x.tpot_ms if t > 0]
    return PointMetrics(
        completed=len(ok),
        failed=len(recs) - len(ok),
        errors=dict(errors),
        duration_s=window_s,
        output_tokens=output_tokens,
        output_throughput_tok_s=output_tokens / window_s if window_s > 0 else 0.0,
        request_throughput_rps=len(ok) / window_s if window_s > 0 else 0.0,
        latency_s=distribution(x.latency_s, ci=ci),
        latency_from_schedule_s=distribution(x.from_schedule_s, ci=ci),
        ttft_ms=distribution(x.ttft_ms, ci=ci),
        ttfo_ms=distribution(x.ttfo_ms, ci=ci),
        itl_ms=distribution(x.itl_ms, ci=ci),
        chunk_gap_ms=distribution(x.chunk_gap_ms, ci=ci),
        tpot_ms=distribution(x.tpot_ms, ci=ci),
        per_stream_tok_s=distribution(per_stream, ci=ci),
        goodput_rps=(good / window_s if window_s > 0 else 0.0) if slo else None,
        goodput_fraction=(good / len(recs) if recs else 0.0) if slo else None,
    )


def point_to_json(
    metrics: PointMetrics,
    *,
    concurrency: int | None,
    rate_rps: float | None,
    server: dict[str, object] | None = None,
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
        "goodput_rps": None if metrics.goodput_rps is None else round(metrics.goodput_rps, 4),
        "goodput_fraction": None
        if metrics.goodput_fraction is None
        else round(metrics.goodput_fraction, 4),
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


def parse_slo(text: str, *, name: str = "SLO") -> Slo:
    """Parse `ttft_ms=500,tpot_ms=50,e2e_s=10` (any subset) into an Slo.

    Errors quote the text after `name` (the CLI passes its flag, `--slo`).

    Raises:
        UsageError: an unknown key, or a value that is not a positive number.
    """
    known = {"ttft_ms", "tpot_ms", "e2e_s"}
    example = "write e.g. ttft_ms=500,tpot_ms=50"
    values: dict[str, float] = {}
    for part in text.split(","):
        key, sep, raw = part.strip().partition("=")
        if not sep or key not in known:
            raise UsageError(
                f"{name} {text!r}: {part.strip()!r} is not one of ttft_ms=, tpot_ms=, e2e_s=",
                fix=example,
            )
        try:
            values[key] = float(raw)
        except ValueError:
            raise UsageError(
                f"{name} {text!r}: {key} needs a number, got {raw!r}", fix=example
            ) from None
        if values[key] <= 0:
            raise UsageError(f"{name} {text!r}: {key} must be positive", fix=example)
    return Slo(**values)
