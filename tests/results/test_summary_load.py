"""Reading summary.json by its schema_version: current, previous format, future, invalid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.bench.store import read_summary, write_summary
from servekit.cli.main import cli
from servekit.results import DocumentError
from servekit.results.summary import load_summary

PROFILE = "minimax-m3-mxfp8-8xa800"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated sweep (schema_version 1) in a run directory."""
    out = tmp_path_factory.mktemp("run") / "sim"
    result = CliRunner().invoke(cli, ["sim", "run", "--profile", PROFILE, "--concurrency", "1,2",
                                      "--requests-per-point", "4", "--output-len", "8",
                                      "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return out


def _doc(run: Path) -> dict[str, Any]:
    return dict(json.loads((run / "summary.json").read_text(encoding="utf-8")))


def _write(directory: Path, doc: object) -> Path:
    directory.mkdir()
    (directory / "summary.json").write_text(json.dumps(doc), encoding="utf-8")
    return directory


def test_a_current_summary_reads_and_writes_back_byte_for_byte(run: Path, tmp_path: Path) -> None:
    """Version 1 reads into the model, and writing it again gives the same file."""
    summary = read_summary(run)
    assert summary.schema_version == 1
    assert [p.concurrency for p in summary.points] == [1, 2]
    assert summary.points[0].server.samples is not None
    write_summary(tmp_path, summary)
    written = (tmp_path / "summary.json").read_text(encoding="utf-8")
    assert written == (run / "summary.json").read_text(encoding="utf-8")


def test_a_previous_format_summary_still_reads(run: Path, tmp_path: Path) -> None:
    """A summary written before schema_version existed reads as the same figures, and
    compare accepts it."""
    old = {k: v for k, v in _doc(run).items() if k != "schema_version"}
    legacy = _write(tmp_path / "old", old)
    summary = read_summary(legacy)
    assert summary.as_json() == _doc(run)
    result = CliRunner().invoke(cli, ["compare", str(legacy), str(run), "--json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["points"]
    assert {r["deltas"]["output_throughput_tok_s"]["delta_pct"] for r in rows} == {0.0}


def test_a_future_version_fails_with_one_line_naming_it(run: Path, tmp_path: Path) -> None:
    """schema_version 2 stops compare with one `servekit: error:` line naming the version
    and the fix."""
    future = _write(tmp_path / "future", {**_doc(run), "schema_version": 2})
    result = CliRunner().invoke(cli, ["compare", str(future), str(run)])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("servekit: error: ")
    assert "schema_version 2, newer than this servekit reads (1)" in lines[0]
    assert "upgrade servekit" in lines[0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": "1"}, "schema_version '1', not a version number"),
        ({"schema_version": 0}, "schema_version 0, which no servekit wrote"),
        ({"surprise": True}, "surprise: Extra inputs are not permitted"),
        ({"points": [{"concurrency": "many"}]}, "points.0.concurrency"),
        ({"points": [{}]}, "schema_version 1: points.0.concurrency: Field required"),
    ],
)
def test_invalid_summaries_name_the_problem(
    run: Path, change: dict[str, Any], message: str
) -> None:
    """A wrong version or an invalid field is a DocumentError naming it."""
    with pytest.raises(DocumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_summary({**_doc(run), **change}, where="x/summary.json")


def test_a_previous_format_summary_missing_fields_reads_them_as_empty() -> None:
    """A hand-written previous-format point lacking figures reads them as None or 0."""
    summary = load_summary({"points": [{"concurrency": 4, "ttft_ms": {"mean": 5.0}}]})
    point = summary.points[0]
    assert (point.concurrency, point.ttft_ms.mean, point.ttft_ms.p99) == (4, 5.0, None)
    assert (point.completed, point.client.valid, point.server.samples) == (0, True, None)
