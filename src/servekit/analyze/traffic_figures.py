"""The traffic figures a run's points are compared and tabled by (core): one list.

Each figure has its key (the compare deltas key), a short label, how to read it from a
summary point, its kind and which way is better. The kind says how a change is judged:

- `rate`: a share in [0, 1] (a hit rate, a fraction of sessions or of tool calls); a change
  is the difference in percentage points, since a relative change from 0 has no value and
  a relative change of a small share overstates it.
- `ms`: a time; a change is relative, in percent.
- `count`: a count or a count per second; a change is relative, in percent.

The per-turn TTFT figures read a turn index: turn 1, and for a comparison the highest turn
index both points have (`last_common_turn`), so the two runs' figures are the same turn.
`compare`, the terminal compare table, the report's comparison tables and the points'
traffic table (`point_columns`) all take their figures from `TRAFFIC_FIGURES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from servekit.results.compare import DeltaBlock
from servekit.results.summary import SummaryPoint

Kind = Literal["rate", "ms", "count"]


@dataclass(frozen=True, slots=True)
class TrafficFigure:
    """One traffic figure: key, label, reader (of a point at a turn index), kind, direction.

    `get(point, turn)` reads the figure; `turn` matters only to the per-turn figures
    (`per_turn`), which read that turn index (None: the point's highest)."""

    name: str
    label: str
    get: Callable[[SummaryPoint, int | None], float | None]
    kind: Kind
    higher_better: bool
    per_turn: bool = False


def turn_ttft(point: SummaryPoint, turn: int | None) -> float | None:
    """A point's mean TTFT at one turn index (None: its highest turn); None when absent."""
    if not point.turns:
        return None
    if turn is None:
        return point.turns[-1].ttft_ms.mean
    block = next((t for t in point.turns if t.turn == turn), None)
    return block.ttft_ms.mean if block is not None else None


def last_common_turn(*points: SummaryPoint) -> int | None:
    """The highest turn index every point has (None when some point has no turns)."""
    common: set[int] | None = None
    for point in points:
        turns = {t.turn for t in point.turns or ()}
        common = turns if common is None else common & turns
    return max(common) if common else None


def _completion(point: SummaryPoint) -> float | None:
    s = point.sessions
    return round(s.completed / s.sessions, 6) if s is not None and s.sessions else None


TRAFFIC_FIGURES: tuple[TrafficFigure, ...] = (
    TrafficFigure("prefix_cache.server_hit_rate", "server hit",
                  lambda p, _: p.prefix_cache.server_hit_rate if p.prefix_cache else None,
                  "rate", True),
    TrafficFigure("prefix_cache.client_hit_rate", "client cached",
                  lambda p, _: p.prefix_cache.client_hit_rate if p.prefix_cache else None,
                  "rate", True),
    TrafficFigure("turns.first.ttft_ms.mean", "turn 1 TTFT", lambda p, _: turn_ttft(p, 1),
                  "ms", False),
    TrafficFigure("turns.last.ttft_ms.mean", "last turn TTFT", turn_ttft, "ms", False,
                  per_turn=True),
    TrafficFigure("sessions.completed_fraction", "completed", lambda p, _: _completion(p),
                  "rate", True),
    TrafficFigure("sessions.turns_per_s", "turns/s",
                  lambda p, _: p.sessions.turns_per_s if p.sessions else None, "count", True),
    TrafficFigure("sessions.tool_args_invalid_rate", "invalid args",
                  lambda p, _: p.sessions.tool_args_invalid_rate if p.sessions else None,
                  "rate", False),
    TrafficFigure("schedule.lag_ms.p99", "lag p99 ms",
                  lambda p, _: p.schedule.lag_ms.p99 if p.schedule else None, "ms", False),
)  # fmt: skip


def traffic_figure(name: str) -> TrafficFigure:
    """The figure with that key."""
    return next(f for f in TRAFFIC_FIGURES if f.name == name)


def shown_value(figure: TrafficFigure, value: float | None) -> str:
    """A figure's value as the comparison tables show it: a share in percent."""
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if figure.kind == "rate" else f"{value:.4g}"


def change_text(block: DeltaBlock) -> str:
    """A traffic delta's change and verdict: points for a share, percent otherwise."""
    if block.delta_pp is not None:
        return f"{block.delta_pp:+.1f} pp ({block.verdict})"
    if block.delta_pct is not None:
        return f"{block.delta_pct:+.1f}% ({block.verdict})"
    return "n/a"


def turn_note(block: DeltaBlock) -> str:
    """` (turn N)` for a per-turn delta that names its turn, else empty."""
    return f" (turn {block.turn})" if block.turn is not None else ""
