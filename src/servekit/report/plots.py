"""The report's plots (shell: matplotlib, headless Agg canvas): each returns a Figure, `png`
encodes one.

Every function takes plain data (labels, numbers and colours), so the report builder decides
what to plot and in which colour, and these only draw. Figures use matplotlib's object API
(no pyplot state). A run keeps one colour in every plot: the builder assigns
`run_colours` once, in run order, and passes each run's colour with its data; the series
of one run differ by line style (mean solid, p99 dashed). Returning the Figure before
encoding lets a test read the colours actually drawn.

Every text drawn (titles, axis labels, legend entries, category ticks) is taken literally:
labels carry run directory names and model names, and matplotlib reads text between two
`$` as mathtext (a bad expression, such as `a$\\frac$`, fails the whole savefig), so each
`$` is escaped (`_literal`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

SIZE = (7.0, 3.6)
# matplotlib's tab10, spelled out so a run's colour does not depend on rcParams; an 11th
# run takes the first colour again
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip
TARGET_COLOUR = "black"  # a target line, never a run's colour
STYLES = ("-", "--", ":", "-.")


def run_colours(count: int) -> list[str]:
    """One colour per run, in run order."""
    return [PALETTE[i % len(PALETTE)] for i in range(count)]


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its legend label, x and y values, its run's colour and a line style."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    colour: str
    style: str = "-"


@dataclass(frozen=True, slots=True)
class Samples:
    """One histogram: its legend label, the values and its run's colour."""

    label: str
    values: Sequence[float]
    colour: str


Panel = tuple[str, Sequence[float], Sequence[float], Sequence[float], Sequence[float]]


def _literal(text: str) -> str:
    """Text matplotlib draws as written: `$` escaped, so no mathtext is parsed."""
    return text.replace("$", r"\$")


def _titles(ax: Axes, title: str, xlabel: str | None, ylabel: str | None) -> None:
    ax.set_title(_literal(title))
    if xlabel is not None:
        ax.set_xlabel(_literal(xlabel))
    if ylabel is not None:
        ax.set_ylabel(_literal(ylabel))


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def lines(
    series: Sequence[Series], *, title: str, xlabel: str, ylabel: str,
    log_x: bool = True, hline: tuple[float, str] | None = None,
) -> Figure:  # fmt: skip
    """Lines of y against x, one per series (concurrency on a log axis by default)."""
    fig = Figure(figsize=SIZE)
    ax = fig.subplots()
    for s in series:
        ax.plot(list(s.xs), list(s.ys), marker="o", color=s.colour, linestyle=s.style,
                label=_literal(s.label))  # fmt: skip
    if hline is not None:
        ax.axhline(hline[0], color=TARGET_COLOUR, linestyle="-.", linewidth=1,
                   label=_literal(hline[1]))  # fmt: skip
    if log_x:
        ax.set_xscale("log", base=2)
    _titles(ax, title, xlabel, ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def histograms(samples: Sequence[Samples], *, title: str, xlabel: str) -> Figure:
    """Overlaid histograms of samples (clipped at the 99.5th percentile of all samples)."""
    fig = Figure(figsize=SIZE)
    ax = fig.subplots()
    every = sorted(v for s in samples for v in s.values)
    top = every[int(len(every) * 0.995) - 1] if every else 1.0
    for s in samples:
        ax.hist([min(v, top) for v in s.values], bins=60, alpha=0.5, color=s.colour,
                label=_literal(f"{s.label} ({len(s.values)})"))  # fmt: skip
    _titles(ax, title, xlabel, "count")
    ax.legend(fontsize="small")
    return fig


def bars(labels: Sequence[str], values: Sequence[float], *, title: str, ylabel: str) -> Figure:
    """Bars of signed values (green up, red down), e.g. A/B changes per load."""
    fig = Figure(figsize=SIZE)
    ax = fig.subplots()
    colours = ["tab:green" if v >= 0 else "tab:red" for v in values]
    ax.bar([_literal(label) for label in labels], list(values), color=colours)
    ax.axhline(0, color="black", linewidth=0.8)
    _titles(ax, title, None, ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def over_time(panels: Sequence[Panel], *, title: str, colour: str) -> Figure:
    """Per point of one run, in the run's colour: KV usage (left axis, %, shaded) and
    running (solid) / waiting (dashed) requests (right axis) over the point's seconds; one
    panel per point."""
    fig = Figure(figsize=(SIZE[0], 1.6 * max(len(panels), 1) + 0.6))
    axes = fig.subplots(max(len(panels), 1), 1, squeeze=False)[:, 0]
    for ax, (label, t, kv, running, waiting) in zip(axes, panels, strict=False):
        ax.fill_between(list(t), [100 * v for v in kv], color=colour, alpha=0.25, linewidth=0,
                        label="KV usage %")  # fmt: skip
        ax.set_ylabel(_literal(label), fontsize="small")
        twin = ax.twinx()
        twin.plot(list(t), list(running), color=colour, label="running")
        twin.plot(list(t), list(waiting), color=colour, linestyle="--", label="waiting")
        ax.grid(True, alpha=0.3)
    axes[0].set_title(_literal(title))
    axes[-1].set_xlabel(
        "seconds into the point (KV usage % shaded, left; running solid, waiting dashed, right)"
    )
    return fig


RunLines = tuple[str, str, Sequence[tuple[str, Sequence[float], Sequence[float]]]]
"""A run's label, its colour, and one (label, x, y) series per load point."""


def by_run(runs: Sequence[RunLines], *, title: str, xlabel: str, ylabel: str) -> Figure:
    """Lines of y against x on linear axes, each run in its colour (its points differ by line
    style), e.g. mean TTFT by turn index."""
    fig = Figure(figsize=SIZE)
    ax = fig.subplots()
    for run, colour, series in runs:
        for number, (label, xs, ys) in enumerate(series):
            ax.plot(list(xs), list(ys), marker="o", color=colour,
                    linestyle=STYLES[number % len(STYLES)],
                    label=_literal(f"{run} {label}"))  # fmt: skip
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _titles(ax, title, xlabel, ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig
