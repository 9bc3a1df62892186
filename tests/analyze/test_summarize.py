"""Known answers for the metric definitions of docs/metrics.md."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servekit.analyze.slo import parse_slo
from servekit.analyze.summarize import (
    distribution,
    point_metrics,
    resample_statistics,
    samples,
)
from servekit.records import RequestRecord

MS = 1_000_000


def record(
    rid: str, sent: int, chunks: list[tuple[int, int]], *, answer_ms: int | None = None
) -> RequestRecord:
    times = tuple(t * MS for t, _ in chunks)
    tokens = tuple(k for _, k in chunks)
    return RequestRecord(
        id=rid,
        point="p",
        scheduled_ns=sent * MS,
        sent_ns=sent * MS,
        first_token_ns=times[0],
        first_answer_ns=(answer_ms * MS) if answer_ms is not None else times[0],
        end_ns=times[-1],
        chunk_ns=times,
        chunk_tokens=tokens,
        output_tokens=sum(tokens),
    )


def test_spec_chunks_split_into_per_token_itl() -> None:
    """A 3-token chunk 30 ms after the previous one gives three 10 ms ITL samples."""
    m = point_metrics([record("a", 0, [(200, 1), (230, 3), (260, 3)])])
    assert m.itl_ms.mean == pytest.approx(10.0)
    assert m.itl_ms.count == 6
    assert m.chunk_gap_ms.mean == pytest.approx(30.0)
    assert m.chunk_gap_ms.count == 2


def test_ttft_ttfo_tpot_and_per_stream() -> None:
    """TTFT from t0 to the first chunk, TTFO to the first answer, TPOT over output - 1 tokens."""
    m = point_metrics([record("a", 100, [(300, 1), (400, 4), (500, 5)], answer_ms=400)])
    assert m.ttft_ms.mean == pytest.approx(200.0)
    assert m.ttfo_ms.mean == pytest.approx(300.0)
    assert m.tpot_ms.mean == pytest.approx(200.0 / 9)
    assert m.per_stream_tok_s.mean == pytest.approx(9 / 0.2)
    assert m.latency_s.mean == pytest.approx(0.4)


def test_throughput_uses_the_point_window() -> None:
    """Output throughput = output tokens / (last end - first send)."""
    m = point_metrics(
        [record("a", 0, [(500, 10), (1000, 10)]), record("b", 1000, [(1500, 5), (2000, 5)])]
    )
    assert m.duration_s == pytest.approx(2.0)
    assert m.output_throughput_tok_s == pytest.approx(30 / 2.0)
    assert m.request_throughput_rps == pytest.approx(1.0)


def test_failures_are_counted_by_kind() -> None:
    """Failed requests count by error kind and add no tokens."""
    ok = record("a", 0, [(100, 2), (200, 2)])
    bad = RequestRecord("b", "p", 0, 0, None, None, 50 * MS, error_kind="stream_cut", error="x")
    m = point_metrics([ok, bad])
    assert (m.completed, m.failed, m.errors) == (1, 1, {"stream_cut": 1})
    assert m.output_tokens == 4


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_are_monotone(samples: list[float]) -> None:
    """p50 <= p90 <= p99, all within [min, max]."""
    d = distribution(samples)
    assert d.p50 is not None
    assert d.p90 is not None
    assert d.p99 is not None
    assert min(samples) <= d.p50 <= d.p90 <= d.p99 <= max(samples) + 1e-9


def test_bootstrap_intervals_bracket_the_estimate() -> None:
    """Each 95% bootstrap interval contains its statistic and is deterministic."""
    samples = [float(x % 37) for x in range(500)]
    d = distribution(samples)
    assert d.ci95 is not None
    for name in ("mean", "p50", "p90", "p99"):
        low, high = d.ci95[name]
        assert low <= getattr(d, name) <= high
    assert distribution(samples).ci95 == d.ci95


def test_goodput_counts_requests_meeting_every_slo() -> None:
    """Goodput counts successful requests within every set bound, per second of window."""
    fast = record("a", 0, [(100, 1), (200, 9)])  # TTFT 100 ms, TPOT 12.5 ms
    slow = record("b", 0, [(900, 1), (1000, 9)])  # TTFT 900 ms
    m = point_metrics([fast, slow], slo=parse_slo("ttft_p99<=500ms,tpot_p99<=20ms"))
    assert m.goodput_fraction == pytest.approx(0.5)
    assert m.goodput_rps == pytest.approx(1 / 1.0)
    assert point_metrics([fast, slow]).goodput_rps is None


def reference_samples(ok: list[RequestRecord]) -> dict[str, list[float]]:
    """The definitions of docs/metrics.md as a plain loop over records and chunks: the
    per-request figures are the record's own properties (`RequestRecord.ttft_ms`, ...)."""
    out: dict[str, list[float]] = {k: [] for k in ("latency", "ttft", "ttfo", "itl", "gap", "tpot")}
    for r in ok:
        out["latency"].append(r.e2e_s)
        if r.ttft_ms is not None:
            out["ttft"].append(r.ttft_ms)
        if r.ttfo_ms is not None:
            out["ttfo"].append(r.ttfo_ms)
        for i in range(1, len(r.chunk_ns)):
            dt_ms = (r.chunk_ns[i] - r.chunk_ns[i - 1]) / 1e6
            out["gap"].append(dt_ms)
            out["itl"].extend([dt_ms / max(r.chunk_tokens[i], 1)] * max(r.chunk_tokens[i], 1))
        if r.tpot_ms is not None:
            out["tpot"].append(r.tpot_ms)
    return out


chunk_lists = st.lists(st.tuples(st.integers(0, 10**8), st.integers(0, 5)), min_size=0, max_size=12)


@given(st.lists(st.tuples(st.integers(0, 10**9), chunk_lists, st.booleans()), max_size=15))
def test_vectorised_samples_equal_the_per_chunk_definition(
    rows: list[tuple[int, list[tuple[int, int]], bool]],
) -> None:
    """samples() gives exactly the floats of the per-chunk loop, in the same order."""
    records = []
    for i, (sent, gaps, answered) in enumerate(rows):
        times = tuple(sent + sum(g for g, _ in gaps[: j + 1]) + 1 for j in range(len(gaps)))
        records.append(
            RequestRecord(
                str(i), "p", sent - 7, sent, times[0] if times else None,
                times[-1] if times and answered else None, (times[-1] if times else sent) + 3,
                times, tuple(k for _, k in gaps), output_tokens=sum(k for _, k in gaps),
            )
        )  # fmt: skip
    got = samples(records)
    want = reference_samples(records)
    assert got.latency_s == want["latency"]
    assert got.ttft_ms == want["ttft"]
    assert got.ttfo_ms == want["ttfo"]
    assert got.itl_ms == want["itl"]
    assert got.chunk_gap_ms == want["gap"]
    assert got.tpot_ms == want["tpot"]


@pytest.mark.parametrize(("clusters", "largest"), [(1, 6), (4, 5), (60, 1), (40, 30)])
def test_resample_statistics_equal_numpy_on_the_built_resample(clusters: int, largest: int) -> None:
    """Each resample's mean and percentiles are np.mean and np.percentile of the resample."""
    rng = np.random.default_rng(clusters)
    sizes = rng.integers(1, largest + 1, size=clusters)
    values = np.round(rng.gamma(2.0, 3.0, size=int(sizes.sum())), 1)  # with ties
    draws = rng.integers(0, clusters, size=(30, clusters))
    table = resample_statistics(values, sizes, draws)
    groups = np.split(values, np.cumsum(sizes)[:-1])
    for b in range(30):
        resample = np.concatenate([groups[c] for c in draws[b]])
        want = [resample.mean(), *np.percentile(resample, [50, 90, 99])]
        assert table[:, b] == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_itl_intervals_resample_whole_requests() -> None:
    """ITL's interval is a bootstrap over requests: with equal-length requests its interval
    of the mean is that of the per-request means, far wider than a per-token bootstrap."""
    records = [
        record(str(i), 0, [(100 + j * (i + 1), 1) for j in range(33)]) for i in range(20)
    ]  # request i: 32 ITL samples of i + 1 ms
    m = point_metrics(records)
    per_request = distribution([float(i + 1) for i in range(20)])
    assert m.itl_ms.ci95 is not None
    assert per_request.ci95 is not None
    assert m.itl_ms.ci95["mean"] == pytest.approx(per_request.ci95["mean"])
    itl = samples(records).itl_ms
    per_token = distribution(itl).ci95
    assert per_token is not None
    width = m.itl_ms.ci95["mean"][1] - m.itl_ms.ci95["mean"][0]
    assert width > 3 * (per_token["mean"][1] - per_token["mean"][0])


def test_one_request_gives_no_itl_interval() -> None:
    """A single request is one cluster: nothing to resample, so its ITL has no interval."""
    m = point_metrics([record("a", 0, [(200, 1), (230, 3), (260, 3)])])
    assert m.itl_ms.ci95 is None
    with pytest.raises(ValueError, match="clusters"):
        distribution([1.0, 2.0, 3.0], clusters=[1, 1])
