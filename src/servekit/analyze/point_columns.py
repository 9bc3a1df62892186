"""The points table's one column spec (core): what each column shows and how, for every view.

A run's points appear as a table in three places (summary.csv, beside them, lists every
figure as data): the brief table printed by `bench` and `sim run`
(terminal), the same table in `summary.md` (Markdown), and the fuller per-load table of
`servekit report` (HTML and report.md). Each column is declared once here, with how its
value is read from a summary point and how each view formats it; the views only lay the cells out.

The brief table (terminal and summary.md) is the deployment's table: concurrency, output
tok/s and mean latency, plus the timing columns; the report adds p99 latency, acceptance
length, completed and valid, with thousands separators and more digits. The report's
traffic table (`traffic_headers`, `traffic_rows`) has only the traffic columns some point
of the run fills: prefix-cache hit rates, turn-1 TTFT and the TTFT of the highest turn
every point with turns reached (its header names the turn), sessions, turns per second,
invalid tool arguments, schedule lag; the shared figures read as `traffic_figures` does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from servekit.analyze.traffic_figures import last_common_turn, traffic_figure, turn_ttft
from servekit.results.summary import SummaryPoint

Point = SummaryPoint
View = Literal["terminal", "markdown", "report"]
Getter = Callable[[Point], object]


def _brief_number(spec: str) -> Callable[[object], str]:
    def cell(value: object) -> str:
        return format(value, spec) if isinstance(value, int | float) else "-"

    return cell


def report_number(digits: int) -> Callable[[object], str]:
    """The report's number format: thousands separators, `digits` decimals, `-` for none."""

    def cell(value: object) -> str:
        return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"

    return cell


def _text(value: object) -> str:
    return str(value)


def _brief_load(point: Point) -> str:
    if point.schedule is not None:
        return "trace"
    if point.concurrency:
        return f"c={point.concurrency}"
    return f"{point.rate_rps} req/s"


def report_load(point: Point) -> str:
    """A point's load as the report names it: `c=4`, `rate=0.5`, or `trace` (a replay)."""
    if point.schedule is not None:
        return "trace"
    if point.concurrency is not None:
        return f"c={point.concurrency}"
    return f"rate={point.rate_rps}"


def _valid(point: Point) -> str:
    return "yes" if point.client.valid else "no"


@dataclass(frozen=True, slots=True)
class Shown:
    """How one view shows a column: its header and the text of a cell."""

    header: str
    cell: Callable[[Point], str]


@dataclass(frozen=True, slots=True)
class PointColumn:
    """One column of the points table and how each view that has it shows it."""

    name: str
    views: Mapping[View, Shown]


def _value(get: Getter, fmt: Callable[[object], str]) -> Callable[[Point], str]:
    return lambda point: fmt(get(point))


def _column(
    name: str,
    get: Getter,
    *,
    brief: tuple[str, str | None] | None,
    report: tuple[str, int | None] | None,
    terminal_header: str | None = None,
) -> PointColumn:
    """A column read by `get`: brief (header, format spec), report (header, digits); a None
    format shows the value as text."""
    views: dict[View, Shown] = {}
    if brief is not None:
        header, spec = brief
        cell = _value(get, _text if spec is None else _brief_number(spec))
        views["terminal"] = Shown(terminal_header or header, cell)
        views["markdown"] = Shown(header, cell)
    if report is not None:
        header, digits = report
        fmt = _text if digits is None else report_number(digits)
        views["report"] = Shown(header, _value(get, fmt))
    return PointColumn(name, views)


POINT_COLUMNS: tuple[PointColumn, ...] = (
    PointColumn(
        "load",
        {
            "terminal": Shown("load", _brief_load),
            "markdown": Shown("load", _brief_load),
            "report": Shown("load", report_load),
        },
    ),
    _column(
        "output_tok_s",
        lambda p: p.output_throughput_tok_s,
        brief=("output tok/s", ".1f"),
        report=("output tok/s", 1),
    ),
    _column(
        "latency_mean_s",
        lambda p: p.latency_s.mean,
        brief=("mean latency s", ".2f"),
        report=("mean latency s", 3),
    ),
    _column("latency_p99_s", lambda p: p.latency_s.p99, brief=None, report=("p99 latency s", 3)),
    _column(
        "ttft_mean_ms",
        lambda p: p.ttft_ms.mean,
        brief=("TTFT ms", ".0f"),
        terminal_header="TTFT ms (mean)",
        report=("mean TTFT ms", 1),
    ),
    _column(
        "tpot_mean_ms",
        lambda p: p.tpot_ms.mean,
        brief=("TPOT ms", ".1f"),
        terminal_header="TPOT ms (mean)",
        report=("mean TPOT ms", 2),
    ),
    _column(
        "per_stream_tok_s",
        lambda p: p.per_stream_tok_s.mean,
        brief=("per-stream tok/s", ".1f"),
        report=("per-stream tok/s", 1),
    ),
    _column(
        "acceptance_length",
        lambda p: p.server.spec_acceptance_length,
        brief=None,
        report=("acceptance length", 2),
    ),
    _column("completed", lambda p: p.completed, brief=None, report=("completed", None)),
    _column("failed", lambda p: p.failed, brief=("failed", None), report=("failed", None)),
    PointColumn("valid", {"report": Shown("valid", _valid)}),
)


def _shown(view: View) -> list[Shown]:
    return [c.views[view] for c in POINT_COLUMNS if view in c.views]


def point_headers(view: View) -> list[str]:
    """The header row of the points table in one view."""
    return [shown.header for shown in _shown(view)]


def point_rows(points: Sequence[Point], view: View) -> list[list[str]]:
    """The body rows of the points table in one view, one row per point, cells as text."""
    shown = _shown(view)
    return [[s.cell(point) for s in shown] for point in points]


def _percent(value: object) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, int | float) else "-"


def _traffic(name: str, header: str, get: Getter, fmt: Callable[[object], str]) -> PointColumn:
    return PointColumn(name, {"report": Shown(header, _value(get, fmt))})


def _figure(name: str) -> Getter:
    """The reader of a shared traffic figure (`traffic_figures.TRAFFIC_FIGURES`)."""
    get = traffic_figure(name).get
    return lambda p: get(p, None)


def _sessions_done(point: Point) -> str | None:
    """Completed of all sessions, then the turn-limited, failed and stopped ones when there
    are any."""
    s = point.sessions
    if s is None:
        return None
    limit = f", {s.turn_limit} at turn limit" if s.turn_limit else ""
    failed = f", {s.failed} failed" if s.failed else ""
    stopped = f", {s.stopped} stopped" if s.stopped else ""
    return f"{s.completed}/{s.sessions}{limit}{failed}{stopped}"


def _as_text(value: object) -> str:
    return "-" if value is None else str(value)


_LAST_TURN = "last_turn_ttft_ms"
# The traffic columns: name, header, reader, cell format. The last-turn TTFT column reads
# the highest turn index every point with turns has, and its header names that turn.
TRAFFIC_COLUMNS: tuple[tuple[str, str, Getter, Callable[[object], str]], ...] = (
    ("server_hit_rate", "server prefix hit", _figure("prefix_cache.server_hit_rate"), _percent),
    ("client_hit_rate", "client cached", _figure("prefix_cache.client_hit_rate"), _percent),
    ("implied_hit_rate", "trace implies",
     lambda p: p.prefix_cache.implied_hit_rate if p.prefix_cache else None, _percent),
    ("turn1_ttft_ms", "turn 1 TTFT ms", _figure("turns.first.ttft_ms.mean"), report_number(1)),
    (_LAST_TURN, "turn {turn} TTFT ms", _figure("turns.last.ttft_ms.mean"), report_number(1)),
    ("sessions", "sessions completed", _sessions_done, _as_text),
    ("turns_per_s", "turns/s", _figure("sessions.turns_per_s"), report_number(2)),
    ("tool_calls", "tool calls", lambda p: p.sessions.tool_calls if p.sessions else None,
     report_number(0)),
    ("tool_args_invalid_rate", "invalid tool args",
     _figure("sessions.tool_args_invalid_rate"), _percent),
    ("schedule_lag_p99_ms", "send lag p99 ms", _figure("schedule.lag_ms.p99"),
     report_number(3)),
    ("schedule_sent", "sent/planned",
     lambda p: f"{p.schedule.sent}/{p.schedule.planned}" if p.schedule else None, _as_text),
)  # fmt: skip


def _traffic_present(points: Sequence[Point]) -> list[PointColumn]:
    """The traffic columns some point fills; the last-turn column only past turn 1."""
    last = last_common_turn(*(p for p in points if p.turns))
    present = []
    for name, header, get, fmt in TRAFFIC_COLUMNS:
        if name == _LAST_TURN:
            if last is None or last == 1:
                continue
            header = header.format(turn=last)
            get = functools.partial(turn_ttft, turn=last)
        if any(get(p) is not None for p in points):
            present.append(_traffic(name, header, get, fmt))
    return present


def traffic_headers(points: Sequence[Point]) -> list[str]:
    """The traffic table's header row: load, then the traffic columns some point fills
    (empty when none does)."""
    present = _traffic_present(points)
    if not present:
        return []
    return ["load", *(c.views["report"].header for c in present)]


def traffic_rows(points: Sequence[Point]) -> list[list[str]]:
    """The traffic table's rows, one per point (none when no point has a traffic figure)."""
    present = _traffic_present(points)
    if not present:
        return []
    return [[report_load(p), *(c.views["report"].cell(p) for c in present)] for p in points]
