"""Known answers for the metric definitions of DESIGN.md section 5."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servekit.analyze.summarize import Slo, distribution, point_metrics
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
    m = point_metrics([fast, slow], slo=Slo(ttft_ms=500, tpot_ms=20))
    assert m.goodput_fraction == pytest.approx(0.5)
    assert m.goodput_rps == pytest.approx(1 / 1.0)
    assert point_metrics([fast, slow]).goodput_rps is None
