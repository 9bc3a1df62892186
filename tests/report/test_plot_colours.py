"""One colour per run in every plot of the report, read from the matplotlib artists the
report really draws (lines, histogram bars, shaded areas), before PNG encoding."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from servekit.cli.main import cli
from servekit.report.build import Plot, Run, load_run, run_plots, turn_plot
from servekit.report.plots import PALETTE, run_colours

PROFILE = "minimax-m3-mxfp8-8xa800"


def _sim_run(out: Path, profile: str, *extra: str) -> Path:
    result = CliRunner().invoke(cli, ["sim", "run", "--profile", profile, "--concurrency", "1,4",
                                      "--output-len", "16", "--out", str(out), *extra])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Run]:
    """EAGLE3 off first (no acceptance points), then EAGLE3 on: real sim runs with records."""
    base = tmp_path_factory.mktemp("colours")
    off = _sim_run(base / "off", f"{PROFILE}-no-eagle3", "--requests-per-point", "8")
    on = _sim_run(base / "on", PROFILE, "--requests-per-point", "8")
    return [load_run(off), load_run(on)]


def _drawn(fig: Figure) -> list[tuple[str, str]]:
    """(legend label, colour) of every line, histogram and shaded area drawn in the figure;
    an unlabelled artist gets the figure's title (the server panels')."""
    title = fig.axes[0].get_title()
    found = []
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_label() and not str(line.get_label()).startswith("_"):
                found.append((str(line.get_label()), to_hex(str(line.get_color()))))
        for container in ax.containers:  # a histogram: its first bar carries the label
            if isinstance(container, BarContainer):
                label = str(container.patches[0].get_label())
                found += [(label, to_hex(bar.get_facecolor(), keep_alpha=False))
                          for bar in container.patches]  # fmt: skip
        for area in ax.collections:
            if isinstance(area, PolyCollection):
                found.append((title, to_hex(area.get_facecolor()[0], keep_alpha=False)))
    return found


def _run_of(label: str, runs: list[Run]) -> str | None:
    """The run a legend label or a panel title belongs to, or None (a target line)."""
    for run in runs:
        if label == run.label or label.startswith((f"{run.label} ", f"{run.label}:")):
            return run.label
    return None


def _colours_by_run(plots: list[Plot], runs: list[Run]) -> dict[str, dict[str, set[str]]]:
    """Per run label: per plot name, the colours that run was drawn in."""
    out: dict[str, dict[str, set[str]]] = {r.label: {} for r in runs}
    for plot in plots:
        for label, colour in _drawn(plot.canvas):
            if (run := _run_of(label, runs)) is not None:
                out[run].setdefault(plot.name, set()).add(colour)
    return out


def test_each_run_keeps_its_colour_in_every_plot(runs: list[Run]) -> None:
    """The second run is drawn in the second colour everywhere, also in the acceptance plot
    where it is the only run (matplotlib's cycle would have given it the first)."""
    plots = run_plots(list(zip(runs, run_colours(2), strict=True)), 60.0)
    names = {p.name for p in plots}
    assert {"throughput", "latency", "per_stream", "acceptance", "ttft", "itl"} <= names
    by_run = _colours_by_run(plots, runs)
    for run, colour in zip(runs, PALETTE, strict=False):
        assert all(used == {colour} for used in by_run[run.label].values()), by_run
    assert set(by_run["on"]) == names - {"server_6"}  # the other run's server panels
    assert set(by_run["off"]) == names - {"acceptance", "server_7"}
    acceptance = next(p for p in plots if p.name == "acceptance")
    assert [c for _, c in _drawn(acceptance.canvas) if c in PALETTE] == [PALETTE[1]]


def test_mean_and_p99_of_a_run_differ_by_line_style(runs: list[Run]) -> None:
    """In the latency plot a run's mean is solid and its p99 dashed, in one colour."""
    plots = run_plots(list(zip(runs, run_colours(2), strict=True)), None)
    latency = next(p for p in plots if p.name == "latency").canvas
    styles = {
        str(line.get_label()): (line.get_linestyle(), to_hex(str(line.get_color())))
        for line in latency.axes[0].get_lines()
        if isinstance(line, Line2D)
    }
    assert styles == {
        "off mean": ("-", PALETTE[0]), "off p99": ("--", PALETTE[0]),
        "on mean": ("-", PALETTE[1]), "on p99": ("--", PALETTE[1]),
    }  # fmt: skip


def test_turn_plot_keeps_the_run_colour_when_an_earlier_run_has_no_turns(
    runs: list[Run], tmp_path: Path
) -> None:
    """A run without sessions draws no turn lines, and the next run keeps its own colour."""
    sessions = _sim_run(tmp_path / "sessions", PROFILE, "--turns", "2", "--sessions", "2",
                        "--input-len", "64")  # fmt: skip
    coloured = list(zip([runs[0], load_run(sessions)], run_colours(2), strict=True))
    plot = turn_plot(coloured)
    assert plot is not None
    drawn = _drawn(plot.canvas)
    assert drawn
    assert {c for _, c in drawn} == {PALETTE[1]}
    assert all(label.startswith("sessions ") for label, _ in drawn)
