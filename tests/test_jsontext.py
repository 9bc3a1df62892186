"""servekit.jsontext: every document servekit writes is strict JSON, never NaN/Infinity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit import jsontext
from servekit.bench.store import read_summary, write_summary
from servekit.cli.main import cli
from servekit.jsontext import NonFiniteNumber
from servekit.records import RequestRecord


def test_dumps_refuses_nan_and_names_where_it_is() -> None:
    """A NaN deep in a document is refused with its path; nothing is written half-way."""
    doc = {"points": [{"rate_rps": 1.0}, {"latency": {"p99": math.nan}}]}
    with pytest.raises(NonFiniteNumber, match=r"summary\.json .* at \$\.points\[1\]\.latency\.p99"):
        jsontext.dumps(doc, what="summary.json")
    with pytest.raises(NonFiniteNumber, match=r"at \$\[0\]"):
        jsontext.dumps([math.inf])


def test_dumps_writes_finite_documents_as_json_does() -> None:
    """Finite documents come out exactly as json.dumps writes them (keys, unicode, indent)."""
    doc = {"b": [1, 2.5, None, True], "a": "é"}
    assert jsontext.dumps(doc) == json.dumps(doc, ensure_ascii=False)
    assert jsontext.dumps(doc, indent=2, sort_keys=True) == json.dumps(
        doc, indent=2, sort_keys=True, ensure_ascii=False
    )


def test_dumps_passes_other_errors_on() -> None:
    """A value JSON cannot hold at all (a set) is still json's own TypeError."""
    with pytest.raises(TypeError):
        jsontext.dumps({"x": {1}})


def test_finite_or_null_replaces_only_non_finite_floats() -> None:
    """A server's NaN becomes null in a transcript; everything else is kept."""
    doc = {"a": [math.nan, 1.5, -math.inf], "b": {"c": 2, "d": "NaN"}, "e": (math.inf,)}
    assert jsontext.finite_or_null(doc) == {
        "a": [None, 1.5, None],
        "b": {"c": 2, "d": "NaN"},
        "e": [None],
    }


def test_write_summary_refuses_a_nan_and_leaves_no_file(tmp_path: Path) -> None:
    """A summary holding NaN (a defect upstream) is not written as invalid JSON."""
    run = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        ["sim", "run", "--profile", "minimax-m3-mxfp8-8xa800", "--concurrency", "1",
         "--requests-per-point", "2", "--input-len", "32", "--output-len", "4", "--out", str(run)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = read_summary(run)
    bad = summary.model_copy(
        update={"workload": summary.workload.model_copy(update={"temperature": math.nan})}
    )
    out = tmp_path / "again"
    out.mkdir()
    with pytest.raises(NonFiniteNumber, match=r"summary\.json holds a non-finite number"):
        write_summary(out, bad)
    assert list(out.iterdir()) == []


def test_a_record_line_is_strict_json() -> None:
    """Records are written through the strict writer too (ints only: always finite)."""
    record = RequestRecord("r1", "c=1", 0, 1, 2, 2, 3, (2,), (1,), 5, 1)
    assert json.loads(record.to_json_line())["id"] == "r1"
