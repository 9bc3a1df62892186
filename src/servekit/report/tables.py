"""Terminal tables of run summaries (view: builds rich renderables, prints nothing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servekit.analyze.point_columns import point_headers, point_rows, traffic_headers, traffic_rows
from servekit.analyze.traffic_figures import (
    TRAFFIC_FIGURES,
    TrafficFigure,
    shown_value,
    turn_note,
)
from servekit.results.compare import CompareRow, DeltaBlock
from servekit.results.summary import SummaryPoint
from servekit.results.validate import CheckBlock


def points_table(points: Sequence[SummaryPoint], *, title: str) -> Table:
    """The deployment's table (concurrency, output tok/s, mean latency) plus timing columns."""
    table = Table(*point_headers("terminal"), title=escape(title), title_justify="left")
    for row in point_rows(points, "terminal"):
        table.add_row(*row)
    return table


def summary_tables(points: Sequence[SummaryPoint], *, title: str) -> list[Table]:
    """The points table, then (when a point has them) the traffic figures: prefix-cache
    hit rates, per-turn TTFT, sessions, tool calls and schedule lag."""
    tables = [points_table(points, title=title)]
    if headers := traffic_headers(points):
        traffic = Table(*headers, title="traffic", title_justify="left")
        for row in traffic_rows(points):
            traffic.add_row(*row)
        tables.append(traffic)
    return tables


# (JSON key, column heading, format of the figure)
_CALIBRATION_FIGURES = (
    ("output_tok_s", "tok/s", "{:.1f}"),
    ("latency_mean_s", "latency s", "{:.3f}"),
    ("latency_p90_s", "p90 s", "{:.3f}"),
    ("ttft_mean_ms", "TTFT ms", "{:.1f}"),
    ("itl_mean_ms", "ITL ms", "{:.2f}"),
)


def calibration_table(points: Sequence[Mapping[str, Any]], *, title: str) -> Table:
    """Per point (fit, then held out): each figure measured, and below it predicted + error;
    a point measured in several runs (rounds) shows each run's directory."""
    table = Table("point", "role", title=escape(title), title_justify="left", show_lines=True)
    for _, heading, _ in _CALIBRATION_FIGURES:
        table.add_column(f"{heading}\nmeasured\npredicted", justify="right")
    labels = [str(p["label"]) for p in points]
    for p in points:
        label = str(p["label"])
        if labels.count(label) > 1:  # rounds of one point: say which run each row is
            label += "\n" + "/".join(Path(str(p["source"])).parts[-2:])
        cells = [escape(label), "held out" if p["held_out"] else "fit"]
        for key, _, fmt in _CALIBRATION_FIGURES:
            measured, predicted = fmt.format(p["measured"][key]), fmt.format(p["predicted"][key])
            cells.append(f"{measured}\n{predicted} {p['error'][key]:+.1%}")
        table.add_row(*cells)
    return table


def coefficients_table(coefficients: Sequence[Mapping[str, Any]], *, title: str) -> Table:
    """Each fitted coefficient: value +- standard error, or undetermined with the reason."""
    table = Table("coefficient", "value", "+-", "note", title=escape(title), title_justify="left")
    for c in coefficients:
        stderr = "" if c["stderr"] is None else f"{c['stderr']:.3g}"
        state = "" if c["determined"] else "undetermined (kept): "
        table.add_row(c["name"], f"{c['value']:.4g}", stderr, Text(state + c["note"]))
    return table


_STATUS_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


def checks_table(checks: Sequence[CheckBlock], *, title: str) -> Table:
    """validate's checks: status, name, one-line detail and duration (details escaped, since
    they quote model output)."""
    table = Table(title=escape(title), show_lines=False)
    for column in ("status", "check", "detail", "s"):
        table.add_column(column, overflow="fold", justify="right" if column == "s" else "left")
    for check in checks:
        status = check.status
        table.add_row(
            Text(status.upper(), style=_STATUS_STYLE.get(status, "")),
            check.name,
            Text(check.detail),
            f"{check.duration_s:.1f}",
        )
    return table


_VERDICT_STYLE = {"better": "green", "worse": "red", "within noise": "dim"}
_COMPARE_COLUMNS = (
    ("output tok/s", "output_throughput_tok_s"),
    ("mean latency", "latency_s.mean"),
    ("p99 latency", "latency_s.p99"),
    ("mean TTFT", "ttft_ms.mean"),
    ("mean TPOT", "tpot_ms.mean"),
    ("per-stream", "per_stream_tok_s.mean"),
)


def compare_table(rows: Sequence[CompareRow], *, title: str) -> Table:
    """compare's rows: per load, B's change against A for each headline metric."""
    table = Table(title=escape(title))  # a server's model name is not markup
    table.add_column("load")
    for label, _ in _COMPARE_COLUMNS:
        table.add_column(label, justify="right")
    notes = [f"{row.load}: {row.excluded}" for row in rows if row.excluded is not None]
    if notes:
        table.caption = escape("* not used for advice: " + "; ".join(notes))
    traffic = [f for f in TRAFFIC_FIGURES if any(f.name in row.deltas for row in rows)]
    for f in traffic:
        table.add_column(f.label + " A -> B", justify="right")
    for row in rows:
        cells: list[Text | str] = [row.load + ("*" if row.excluded is not None else "")]
        for _, key in _COMPARE_COLUMNS:
            d = row.deltas[key]
            if d.delta_pct is None:
                cells.append("n/a")
                continue
            style = _VERDICT_STYLE.get(d.verdict, "")
            cells.append(Text(f"{d.delta_pct:+.1f}%", style=style))
        for f in traffic:
            cells.append(_side_by_side(f, row.deltas.get(f.name)))
        table.add_row(*cells)
    return table


def _side_by_side(figure: TrafficFigure, d: DeltaBlock | None) -> Text | str:
    """A traffic figure of both runs, `A -> B` (and the turn a per-turn figure compares),
    coloured by B's verdict."""
    if d is None:
        return "-"
    text = f"{shown_value(figure, d.a)} -> {shown_value(figure, d.b)}{turn_note(d)}"
    return Text(text, style=_VERDICT_STYLE.get(d.verdict, ""))
