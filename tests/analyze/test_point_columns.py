"""The points table's column spec: one declaration, three views."""

from __future__ import annotations

from servekit.analyze.point_columns import POINT_COLUMNS, point_headers, point_rows
from servekit.results.summary import load_summary

POINT = {
    "concurrency": 4,
    "rate_rps": None,
    "completed": 64,
    "failed": 1,
    "output_throughput_tok_s": 12345.678,
    "latency_s": {"mean": 2.3456, "p99": 3.5},
    "ttft_ms": {"mean": 85.4},
    "tpot_ms": {"mean": 19.25},
    "per_stream_tok_s": {"mean": 52.31},
    "server": {"spec_acceptance_length": 2.413},
    "client": {"valid": False},
}
OPEN = {**POINT, "concurrency": None, "rate_rps": 2.0, "latency_s": {"mean": None}}
# Read as a summary of the previous format (what a point lacks is left empty).
POINT, OPEN = load_summary({"points": [POINT, OPEN]}).points


def test_brief_views_share_cells_and_differ_only_in_two_headers() -> None:
    """Terminal and summary.md show the same cells; only TTFT/TPOT headers say '(mean)'."""
    assert point_rows([POINT, OPEN], "terminal") == point_rows([POINT, OPEN], "markdown")
    assert point_rows([POINT, OPEN], "markdown") == [
        ["c=4", "12345.7", "2.35", "85", "19.2", "52.3", "1"],
        ["2.0 req/s", "12345.7", "-", "85", "19.2", "52.3", "1"],
    ]
    assert point_headers("terminal") == [
        "load", "output tok/s", "mean latency s", "TTFT ms (mean)", "TPOT ms (mean)",
        "per-stream tok/s", "failed",
    ]  # fmt: skip
    assert point_headers("markdown")[3:5] == ["TTFT ms", "TPOT ms"]


def test_report_view_adds_columns_with_separators_and_more_digits() -> None:
    """The report's table has every brief column plus p99, acceptance, completed and valid."""
    assert point_rows([POINT, OPEN], "report") == [
        ["c=4", "12,345.7", "2.346", "3.500", "85.4", "19.25", "52.3", "2.41", "64", "1", "no"],
        ["rate=2.0", "12,345.7", "-", "-", "85.4", "19.25", "52.3", "2.41", "64", "1", "no"],
    ]
    brief = {c.name for c in POINT_COLUMNS if "markdown" in c.views}
    report = {c.name for c in POINT_COLUMNS if "report" in c.views}
    assert brief < report
