"""Per-point metrics exactly as docs/metrics.md defines them (core).

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
from itertools import chain

import numpy as np
import numpy.typing as npt

from servekit.analyze.slo import Slo
from servekit.records import RequestRecord
from servekit.results.summary import (
    SUMMARY_VERSION,
    ClientBlock,
    DistributionBlock,
    ServerBlock,
    Summary,
    SummaryPoint,
    Target,
    Workload,
)

NS_PER_S = 1e9
NS_PER_MS = 1e6


BOOTSTRAP_RESAMPLES = 200
STATS = ("mean", "p50", "p90", "p99")
_PERCENTILES = (50.0, 90.0, 99.0)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and percentiles of one metric (NaN-free; None when there are no samples).

    `ci95` holds a 95% bootstrap confidence interval (percentile method) for each statistic,
    resampling whole requests (see `distribution`).
    """

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    count: int
    ci95: dict[str, tuple[float, float]] | None = None

    def to_block(self) -> DistributionBlock:
        """The summary.json block, figures rounded to 4 decimals."""
        return DistributionBlock(
            mean=_round(self.mean),
            p50=_round(self.p50),
            p90=_round(self.p90),
            p99=_round(self.p99),
            count=self.count,
            ci95=None
            if self.ci95 is None
            else {k: (round(lo, 4), round(hi, 4)) for k, (lo, hi) in self.ci95.items()},
        )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def distribution(
    samples: Sequence[float] | FloatArray,
    *,
    ci: bool = True,
    clusters: Sequence[int] | IntArray | None = None,
) -> Distribution:
    """Return mean, p50, p90 and p99 (linear interpolation) of samples, with bootstrap CIs.

    `clusters` gives the sizes of consecutive groups of samples that belong together (the
    per-token samples of one request); without it every sample is its own group. The
    bootstrap resamples whole groups with replacement (a cluster bootstrap over requests),
    BOOTSTRAP_RESAMPLES times with a fixed seed, so the same samples always give the same
    intervals; it needs at least two groups.
    """
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        return Distribution(None, None, None, None, 0)
    sizes = (
        np.ones(values.size, dtype=np.int64)
        if clusters is None
        else np.asarray(clusters, dtype=np.int64)
    )
    if int(sizes.sum()) != values.size or (sizes.size and int(sizes.min()) < 1):
        raise ValueError("clusters must be positive sizes that add up to the number of samples")
    p50, p90, p99 = np.percentile(values, _PERCENTILES)
    intervals = _bootstrap(values, sizes) if ci and sizes.size > 1 else None
    return Distribution(
        float(values.mean()), float(p50), float(p90), float(p99), int(values.size), intervals
    )


def _bootstrap(values: FloatArray, sizes: IntArray) -> dict[str, tuple[float, float]]:
    rng = np.random.default_rng(0)
    draws = rng.integers(0, sizes.size, size=(BOOTSTRAP_RESAMPLES, sizes.size))
    table = resample_statistics(values, sizes, draws)
    lo, hi = np.percentile(table, [2.5, 97.5], axis=1)
    return {name: (float(lo[i]), float(hi[i])) for i, name in enumerate(STATS)}


def resample_statistics(values: FloatArray, sizes: IntArray, draws: IntArray) -> FloatArray:
    """Mean, p50, p90 and p99 (rows) of each cluster resample (columns).

    Row b of `draws` lists the clusters (indices into `sizes`) drawn for resample b; a
    resample is every sample of every drawn cluster, a cluster drawn twice counting twice.
    The result is what np.mean and np.percentile (linear) give on that resample (up to
    rounding), computed without building it: the samples are sorted once, each resample
    becomes a weight per cluster, and each order statistic is found by the resample's
    cumulative weight, first over equal-count bins of the sorted samples, then inside one
    bin. Beyond that one sort, B resamples cost O(B * sqrt(samples * clusters)), not
    O(B * samples).
    """
    n, total = sizes.size, values.size
    resamples = draws.shape[0]
    offsets = (np.arange(resamples, dtype=np.int64) * n)[:, None]
    weights = np.bincount((draws + offsets).ravel(), minlength=resamples * n).reshape(resamples, n)
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    sums = np.bincount(owner, weights=values, minlength=n)
    counts = weights @ sizes  # samples in each resample
    means = (weights @ sums) / counts
    if n == total:  # one sample per cluster: index the resamples directly
        picked = np.sort(values[draws], axis=1)  # n samples per resample
        ranks = _ranks(counts)
        low = np.take_along_axis(picked, ranks[0], axis=1)
        high = np.take_along_axis(picked, ranks[1], axis=1)
        return np.vstack([means, (low + ranks[2] * (high - low)).T])
    order = np.argsort(values)  # ties are equal values: any order of them will do
    ordered, owner = values[order], owner[order]
    # Bins trade the weights product (resamples x clusters x bins) against the search inside
    # one bin (resamples x 6 x width); a gather costs about fifteen multiply-adds.
    bins = int(min(total, np.ceil(np.sqrt(_BIN_COST * total / n))))
    width = -(-total // bins)
    bins = -(-total // width)
    per_bin = np.bincount(owner * bins + np.arange(total) // width, minlength=n * bins)
    # float64 so the product runs in BLAS; counts stay exact below 2**53
    cumulative = np.cumsum(
        weights.astype(np.float64) @ per_bin.reshape(n, bins).astype(np.float64), axis=1
    )  # resamples x bins
    low_rank, high_rank, frac = _ranks(counts)
    positions = np.hstack([low_rank, high_rank])  # resamples x 6 ranks in each resample
    chosen = np.empty(positions.shape, dtype=np.float64)
    for first in range(0, resamples, _BLOCK):
        rows = slice(first, first + _BLOCK)
        chosen[rows] = _select(
            ordered, owner, weights[rows], cumulative[rows], positions[rows], width
        )
    k = len(_PERCENTILES)
    low, high = chosen[:, :k], chosen[:, k:]
    return np.vstack([means, (low + frac * (high - low)).T])


_BLOCK = 25  # resamples searched at once (bounds the memory of the search inside bins)
_BIN_COST = 90.0


def _select(
    ordered: FloatArray,
    owner: IntArray,
    weights: IntArray,
    cumulative: FloatArray,
    positions: IntArray,
    width: int,
) -> FloatArray:
    """The sample at each rank of `positions` (resamples x ranks) in each resample."""
    total = ordered.size
    found = (cumulative[:, None, :] <= positions[:, :, None]).sum(axis=2)  # the rank's bin
    before = np.where(
        found > 0, np.take_along_axis(cumulative, np.maximum(found - 1, 0), axis=1), 0
    )
    start = found * width
    inside = start[:, :, None] + np.arange(width)  # sorted ranks of that bin
    valid = inside < total
    inside = np.minimum(inside, total - 1)
    rows = np.arange(weights.shape[0])[:, None, None]
    local = np.where(valid, weights[rows, owner[inside]], 0).cumsum(axis=2)
    step = (local <= (positions - before)[:, :, None]).sum(axis=2)
    chosen: FloatArray = ordered[np.minimum(start + step, total - 1)]
    return chosen


def _ranks(counts: IntArray) -> tuple[IntArray, IntArray, FloatArray]:
    """For resamples of `counts` samples: the ranks either side of each percentile and the
    interpolation fraction between them (np.percentile's linear method), resamples x 3."""
    h = (counts[:, None] - 1) * (np.asarray(_PERCENTILES) / 100.0)
    low = np.floor(h).astype(np.int64)
    high = np.minimum(low + 1, counts[:, None] - 1)
    return low, high, h - low


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
    # successful requests by where their tokens per chunk came from (RequestRecord
    # .token_source); None when no record said (records of an older servekit)
    token_sources: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Samples:
    """The per-request and per-token samples of successful requests (docs/metrics.md)."""

    latency_s: list[float]
    from_schedule_s: list[float]
    ttft_ms: list[float]
    ttfo_ms: list[float]
    itl_ms: list[float]  # a chunk of k tokens after dt gives k samples of dt/k
    chunk_gap_ms: list[float]
    tpot_ms: list[float]


@dataclass(frozen=True, slots=True)
class SampleArrays:
    """The samples of `Samples` as arrays, with the request each per-token sample came from.

    `itl_sizes` and `gap_sizes` are the number of ITL and chunk-gap samples of each request
    that has any, in order: the clusters the bootstrap resamples.
    """

    latency_s: FloatArray
    from_schedule_s: FloatArray
    ttft_ms: FloatArray
    ttfo_ms: FloatArray
    itl_ms: FloatArray
    itl_sizes: IntArray
    chunk_gap_ms: FloatArray
    gap_sizes: IntArray
    tpot_ms: FloatArray


def samples(ok: Iterable[RequestRecord]) -> Samples:
    """Collect the samples of successful records (failed ones must be filtered out first)."""
    a = sample_arrays(list(ok))
    return Samples(
        a.latency_s.tolist(),
        a.from_schedule_s.tolist(),
        a.ttft_ms.tolist(),
        a.ttfo_ms.tolist(),
        a.itl_ms.tolist(),
        a.chunk_gap_ms.tolist(),
        a.tpot_ms.tolist(),
    )


def sample_arrays(ok: Sequence[RequestRecord]) -> SampleArrays:
    """`samples` computed with numpy: each value is the same float the definition gives."""
    n = len(ok)

    def column(values: Iterable[int]) -> IntArray:
        return np.fromiter(values, dtype=np.int64, count=n)

    sent = column(r.sent_ns for r in ok)
    end = column(r.end_ns for r in ok)
    first_token = column(r.first_token_ns or 0 for r in ok)
    first_answer = column(r.first_answer_ns or 0 for r in ok)
    lengths = column(len(r.chunk_ns) for r in ok)
    total = int(lengths.sum())
    times = np.fromiter(chain.from_iterable(r.chunk_ns for r in ok), np.int64, count=total)
    tokens = np.fromiter(
        chain.from_iterable(r.chunk_tokens[: len(r.chunk_ns)] for r in ok), np.int64, count=total
    )  # a token count per chunk time (extra counts, never written by servekit, are ignored)
    # gap i is chunk i+1 - chunk i of the flat arrays; keep those inside one request
    starts = np.cumsum(lengths) - lengths
    inside = np.ones(max(total - 1, 0), dtype=bool)
    inside[starts[(starts > 0) & (starts < total)] - 1] = False
    gap_ms = np.diff(times)[inside] / NS_PER_MS
    per_chunk = np.maximum(tokens[1:][inside], 1)
    gaps = np.maximum(lengths - 1, 0)
    itl = np.bincount(np.repeat(np.arange(n), gaps), weights=per_chunk, minlength=n)
    output = column(r.output_tokens for r in ok)
    tpot_rows = (output > 1) & (lengths > 1)
    first, last = starts[tpot_rows], starts[tpot_rows] + lengths[tpot_rows] - 1
    return SampleArrays(
        latency_s=(end - sent) / NS_PER_S,
        from_schedule_s=(end - column(r.scheduled_ns for r in ok)) / NS_PER_S,
        ttft_ms=(first_token - sent)[first_token != 0] / NS_PER_MS,
        ttfo_ms=(first_answer - sent)[first_answer != 0] / NS_PER_MS,
        itl_ms=np.repeat(gap_ms / per_chunk, per_chunk),
        itl_sizes=itl[gaps > 0].astype(np.int64),
        chunk_gap_ms=gap_ms,
        gap_sizes=gaps[gaps > 0],
        tpot_ms=(times[last] - times[first]) / NS_PER_MS / (output[tpot_rows] - 1),
    )


def point_metrics(
    records: Iterable[RequestRecord], *, slo: Slo | None = None, ci: bool = True
) -> PointMetrics:
    """Compute one point's metrics from its records (goodput when an SLO is given)."""
    recs = list(records)
    ok = [r for r in recs if r.ok]
    errors = Counter(r.error_kind for r in recs if not r.ok and r.error_kind)
    window_ns = (max(r.end_ns for r in recs) - min(r.sent_ns for r in recs)) if recs else 0
    window_s = window_ns / NS_PER_S
    x = sample_arrays(ok)
    output_tokens = sum(r.output_tokens for r in ok)
    good = sum(1 for r in recs if slo.met_by(r)) if slo else 0
    per_stream = 1000.0 / x.tpot_ms[x.tpot_ms > 0]
    sources = Counter(r.token_source for r in ok if r.token_source is not None)
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
        itl_ms=distribution(x.itl_ms, ci=ci, clusters=x.itl_sizes),
        chunk_gap_ms=distribution(x.chunk_gap_ms, ci=ci, clusters=x.gap_sizes),
        tpot_ms=distribution(x.tpot_ms, ci=ci),
        per_stream_tok_s=distribution(per_stream, ci=ci),
        goodput_rps=(good / window_s if window_s > 0 else 0.0) if slo else None,
        goodput_fraction=(good / len(recs) if recs else 0.0) if slo else None,
        token_sources=dict(sorted(sources.items())) if sources else None,
    )


def point_to_json(
    metrics: PointMetrics,
    *,
    concurrency: int | None,
    rate_rps: float | None,
    server: ServerBlock | None = None,
    client: ClientBlock | None = None,
) -> SummaryPoint:
    """Return one entry of summary.json's `points` (docs/schemas/README.md)."""
    return SummaryPoint(
        concurrency=concurrency,
        rate_rps=rate_rps,
        completed=metrics.completed,
        failed=metrics.failed,
        errors=metrics.errors,
        duration_s=round(metrics.duration_s, 4),
        output_tokens=metrics.output_tokens,
        output_throughput_tok_s=round(metrics.output_throughput_tok_s, 3),
        request_throughput_rps=round(metrics.request_throughput_rps, 4),
        latency_s=metrics.latency_s.to_block(),
        latency_from_schedule_s=metrics.latency_from_schedule_s.to_block(),
        ttft_ms=metrics.ttft_ms.to_block(),
        ttfo_ms=metrics.ttfo_ms.to_block(),
        itl_ms=metrics.itl_ms.to_block(),
        chunk_gap_ms=metrics.chunk_gap_ms.to_block(),
        tpot_ms=metrics.tpot_ms.to_block(),
        per_stream_tok_s=metrics.per_stream_tok_s.to_block(),
        goodput_rps=None if metrics.goodput_rps is None else round(metrics.goodput_rps, 4),
        goodput_fraction=None
        if metrics.goodput_fraction is None
        else round(metrics.goodput_fraction, 4),
        server=server if server is not None else ServerBlock(),
        client=client if client is not None else ClientBlock(valid=True, warnings=[]),
        token_sources=metrics.token_sources,
    )


def summary_document(
    *,
    servekit_version: str,
    started_at: str,
    target: Target,
    workload: Workload,
    points: list[SummaryPoint],
) -> Summary:
    """Return the whole summary.json document of a run (docs/schemas/README.md)."""
    return Summary(
        schema_version=SUMMARY_VERSION,
        servekit_version=servekit_version,
        started_at=started_at,
        target=target,
        workload=workload,
        points=points,
    )
