"""Unit tests of the client's self-certification and token reconciliation."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.bench.selfcheck import certify, token_mismatch
from servekit.bench.store import RecordWriter
from servekit.client.urls import redact_url
from servekit.errors import ServekitError, UsageError
from servekit.records import RequestRecord
from servekit.workload.synthetic import check_arrival


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
    assert token_mismatch([rec(5), rec(5)], 10) == []
    assert "generated 12 tokens" in token_mismatch([rec(5), rec(5)], 12)[0]
    assert token_mismatch([rec(5), rec(0, ok=False)], 12) == []
    assert token_mismatch([rec(5)], None) == []


def test_redact_url_drops_credentials() -> None:
    """User and password never reach summary.json or the screen."""
    assert redact_url("http://user:pw@10.0.0.1:8000/x") == "http://10.0.0.1:8000/x"
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


def test_existing_run_directory_is_refused(tmp_path: Path) -> None:
    """A second run into the same directory is refused instead of mixing records."""
    with RecordWriter(tmp_path) as writer:
        writer.write(rec(3))
    with pytest.raises(ServekitError, match="already holds a run"):
        RecordWriter(tmp_path)


@pytest.mark.parametrize("text", ["gamma:abc", "gamma:0", "gamma:-1", "gamma:nan", "zipf"])
def test_bad_arrivals_are_usage_errors(text: str) -> None:
    """Only poisson, constant and gamma:SHAPE (SHAPE > 0) are accepted."""
    with pytest.raises(UsageError, match="is not poisson, constant or gamma:SHAPE"):
        check_arrival(text)
    check_arrival("gamma:0.5")
