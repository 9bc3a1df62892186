"""The report's traffic parts (core): prefix cache, sessions and agent loops, schedule, and
the per-turn TTFT plot's data.

Each part appears only when some point of some run has its block, so a plain run's report
has none of them. Cells are plain text; the renderer escapes them (a run's label is the
user's directory name).
"""

from __future__ import annotations

from collections.abc import Sequence

from servekit.analyze.point_columns import report_load
from servekit.report.document import Section, Table
from servekit.results.summary import DistributionBlock, Summary


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _dist(block: DistributionBlock, digits: int = 1) -> str:
    """`mean / p99` of a distribution."""
    return f"{_num(block.mean, digits)} / {_num(block.p99, digits)}"


Labelled = Sequence[tuple[str, Summary]]
Series = tuple[str, list[float], list[float]]  # a point's label, turn indexes, mean TTFT ms


def prefix_cache_section(runs: Labelled) -> Section | None:
    """Prefix-cache reuse per point: the server's counters, the client's usage, the trace."""
    tables = []
    for label, summary in runs:
        rows = [
            [report_load(p), _num(c.server_queried_tokens, 0), _num(c.server_hit_tokens, 0),
             _pct(c.server_hit_rate), _num(c.client_prompt_tokens, 0),
             _num(c.client_cached_tokens, 0), _pct(c.client_hit_rate), _pct(c.implied_hit_rate)]
            for p in summary.points
            if (c := p.prefix_cache) is not None
        ]  # fmt: skip
        if rows:
            header = ["load", "server queried tok", "server hit tok", "server hit rate",
                      "client prompt tok", "client cached tok", "client hit rate",
                      "trace implies"]  # fmt: skip
            tables.append(Table(f"{label}: prefix cache", header, rows))
    if not tables:
        return None
    return Section(
        "Prefix cache",
        ["Server: /metrics deltas of vllm:prefix_cache_queries and vllm:prefix_cache_hits over "
         "the point (tokens). Client: usage prompt_tokens and prompt_tokens_details."
         "cached_tokens summed over successful requests. A dash: the source said nothing."],
        tables,
    )  # fmt: skip


def sessions_section(runs: Labelled) -> Section | None:
    """Sessions and agent loops per point, and each point's turns."""
    tables = []
    for label, summary in runs:
        rows = []
        for p in summary.points:
            if (s := p.sessions) is None:
                continue
            rows.append([
                report_load(p), str(s.sessions), str(s.completed), str(s.turn_limit),
                str(s.failed), _num(s.turns_completed_mean, 2), _dist(s.duration_s, 2),
                _num(s.turns_per_s, 2), _num(s.tool_calls, 0), _num(s.tool_calls_per_session, 2),
                _num(s.tool_args_invalid, 0), _pct(s.tool_args_invalid_rate),
            ])  # fmt: skip
        if rows:
            header = ["load", "sessions", "completed", "turn limit", "failed", "turns mean",
                      "duration s mean / p99", "turns/s", "tool calls", "calls/session",
                      "invalid args", "invalid rate"]  # fmt: skip
            tables.append(Table(f"{label}: sessions", header, rows))
        for p in summary.points:
            if not p.turns:
                continue
            turn_rows = [
                [str(t.turn), str(t.requests), str(t.failed), _dist(t.ttft_ms), _dist(t.itl_ms, 2),
                 _num(t.prompt_tokens_mean), _num(t.cached_tokens_mean)]
                for t in p.turns
            ]  # fmt: skip
            header = ["turn", "requests", "failed", "TTFT ms mean / p99", "ITL ms mean / p99",
                      "prompt tok mean", "cached tok mean"]  # fmt: skip
            tables.append(Table(f"{label} {report_load(p)}: per turn", header, turn_rows))
    if not tables:
        return None
    return Section(
        "Sessions and agent loops",
        ["A session lasts from its first send to the end of its last response; turns/s "
         "counts successful turns over the whole point. Tool figures are for agent loops "
         "only."],
        tables,
    )  # fmt: skip


def schedule_section(runs: Labelled) -> Section | None:
    """How closely each replay point kept its schedule."""
    tables = []
    for label, summary in runs:
        rows = [
            [report_load(p), str(s.planned), str(s.sent), _num(s.lag_ms.mean, 3),
             _num(s.lag_ms.p50, 3), _num(s.lag_ms.p99, 3), f"{s.max_lag_ms_p99:g}",
             "yes" if s.valid else "no"]
            for p in summary.points
            if (s := p.schedule) is not None
        ]  # fmt: skip
        if rows:
            header = ["load", "planned", "sent", "lag ms mean", "lag ms p50", "lag ms p99",
                      "p99 bound ms", "valid"]  # fmt: skip
            tables.append(Table(f"{label}: schedule", header, rows))
    if not tables:
        return None
    return Section(
        "Schedule",
        [
            "Send lag = when a request was sent - when the trace scheduled it. A point is "
            "valid when every planned send was made and the lag p99 is within the bound."
        ],
        tables,
    )


def turn_series(summary: Summary) -> list[Series]:
    """Mean TTFT by turn index of one run: one series per point that has turns."""
    series: list[Series] = []
    for p in summary.points:
        turns = [t for t in p.turns or () if t.ttft_ms.mean is not None]
        if turns:
            xs = [float(t.turn) for t in turns]
            ys = [float(t.ttft_ms.mean or 0.0) for t in turns]
            series.append((report_load(p), xs, ys))
    return series
