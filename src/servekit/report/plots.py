"""The report's plots (shell: matplotlib, headless Agg canvas): each returns PNG bytes.

Every function takes plain data (labels and numbers), so the report builder decides what
to plot and these only draw. Figures use matplotlib's object API (no pyplot state).

Every text drawn (titles, axis labels, legend entries, category ticks) is taken literally:
labels carry run directory names and model names, and matplotlib reads text between two
`$` as mathtext (a bad expression, such as `a$\\frac$`, fails the whole savefig), so each
`$` is escaped (`_literal`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

Series = tuple[str, Sequence[float], Sequence[float]]  # label, x, y
Panel = tuple[str, Sequence[float], Sequence[float], Sequence[float], Sequence[float]]
SIZE = (7.0, 3.6)


def _literal(text: str) -> str:
    """Text matplotlib draws as written: `$` escaped, so no mathtext is parsed."""
    return text.replace("$", r"\$")


def _titles(ax: Axes, title: str, xlabel: str | None, ylabel: str | None) -> None:
    ax.set_title(_literal(title))
    if xlabel is not None:
        ax.set_xlabel(_literal(xlabel))
    if ylabel is not None:
        ax.set_ylabel(_literal(ylabel))


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def lines(
    series: Sequence[Series], *, title: str, xlabel: str, ylabel: str,
    log_x: bool = True, hline: tuple[float, str] | None = None,
) -> bytes:  # fmt: skip
    """Lines of y against x, one per series (concurrency on a log axis by default)."""
    fig = Figure(figsize=SIZE)
    ax = fig.subplots()
    for label, xs, ys in series:
        ax.plot(list(xs), list(ys), marker="o", label=_literal(label))
    if hline is not None:
        ax.axhline(hline[0], color="tab:red", linestyle="--", label=_literal(hline[1]))
    if log_x:
        ax.set_xscale("log", base=2)
    _titles(ax, title, xlabel, ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def histograms(samples: Sequence[tuple[str, Sequence[float]]], *, title: str, xlabel: str) -> bytes:
    """Overlaid histograms of samples (clipped at the 99.5th percentile of all samples)."""
    fig = Figure(figsize=SIZE)
    ax = fig.subplots()
    every = sorted(v for _, values in samples for v in values)
    top = every[int(len(every) * 0.995) - 1] if every else 1.0
    for label, values in samples:
        ax.hist([min(v, top) for v in values], bins=60, alpha=0.5,
                label=_literal(f"{label} ({len(values)})"))  # fmt: skip
    _titles(ax, title, xlabel, "count")
    ax.legend(fontsize="small")
    return _png(fig)


def bars(labels: Sequence[str], values: Sequence[float], *, title: str, ylabel: str) -> bytes:
    """Bars of signed values (green up, red down), e.g. A/B changes per load."""
    fig = Figure(figsize=SIZE)
    ax = fig.subplots()
    colours = ["tab:green" if v >= 0 else "tab:red" for v in values]
    ax.bar([_literal(label) for label in labels], list(values), color=colours)
    ax.axhline(0, color="black", linewidth=0.8)
    _titles(ax, title, None, ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def over_time(panels: Sequence[Panel], *, title: str) -> bytes:
    """Per point: KV usage (left axis, %) and running/waiting requests (right axis) over
    the point's seconds; one panel per point."""
    fig = Figure(figsize=(SIZE[0], 1.6 * max(len(panels), 1) + 0.6))
    axes = fig.subplots(max(len(panels), 1), 1, squeeze=False)[:, 0]
    for ax, (label, t, kv, running, waiting) in zip(axes, panels, strict=False):
        ax.plot(list(t), [100 * v for v in kv], color="tab:purple", label="KV usage %")
        ax.set_ylabel(_literal(label), fontsize="small")
        twin = ax.twinx()
        twin.plot(list(t), list(running), color="tab:blue", label="running")
        twin.plot(list(t), list(waiting), color="tab:orange", label="waiting")
        ax.grid(True, alpha=0.3)
    axes[0].set_title(_literal(title))
    axes[-1].set_xlabel("seconds into the point (KV % purple; running blue, waiting orange)")
    return _png(fig)


RunLines = tuple[str, Sequence[Series]]  # a run's label, and one series per load point


def by_run(runs: Sequence[RunLines], *, title: str, xlabel: str, ylabel: str) -> bytes:
    """Lines of y against x on linear axes, one colour per run (its points differ by line
    style), e.g. mean TTFT by turn index."""
    fig = Figure(figsize=SIZE)
    ax = fig.subplots()
    styles = ("-", "--", ":", "-.")
    for index, (run, series) in enumerate(runs):
        colour = f"C{index % 10}"
        for number, (label, xs, ys) in enumerate(series):
            ax.plot(list(xs), list(ys), marker="o", color=colour,
                    linestyle=styles[number % len(styles)],
                    label=_literal(f"{run} {label}"))  # fmt: skip
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _titles(ax, title, xlabel, ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)
