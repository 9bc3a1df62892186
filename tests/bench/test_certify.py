"""Unit tests of the client's self-certification and token reconciliation."""

from __future__ import annotations

from servekit.bench.runner import _token_mismatch, certify
from servekit.records import RequestRecord


def rec(tokens: int, ok: bool = True) -> RequestRecord:
    return RequestRecord(
        "a", "p", 0, 0, 1, 1, 2, (1,), (tokens,), output_tokens=tokens,
        error_kind=None if ok else "stream_cut",
    )  # fmt: skip


def test_certify_flags_a_lagging_or_busy_client() -> None:
    """Loop lag over 20 ms or send lag over 10 ms (p99), or CPU over 90%, invalidate a point."""
    warnings, figures = certify([0.5] * 100, [], 0.3)
    assert warnings == []
    assert figures["loop_lag_ms_p99"] == 0.5
    warnings, _ = certify([0.5] * 90 + [30.0] * 10, [15.0] * 10, 0.95)
    assert len(warnings) == 3
    assert "event loop lagged 30.0 ms" in warnings[0]


def test_token_mismatch_only_when_all_succeeded() -> None:
    """A server counter that disagrees with the client's tokens is flagged, if comparable."""
    assert _token_mismatch([rec(5), rec(5)], 10) == []
    assert "generated 12 tokens" in _token_mismatch([rec(5), rec(5)], 12)[0]
    assert _token_mismatch([rec(5), rec(0, ok=False)], 12) == []
    assert _token_mismatch([rec(5)], None) == []
