"""`servekit up`'s display (view, rich): the start line, a progress bar over stages, readiness."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from servekit.doctor.log_analysis import LogAnalysis
from servekit.render.shell import quote_words
from servekit.report.log_view import capacity_lines
from servekit.runtime.follow import StartupOutcome
from servekit.runtime.stages import STAGE_LABELS, STAGES
from servekit.runtime.state import EngineState


def print_started(console: Console, state: EngineState) -> None:
    """What was started, where its log is, and the exact command."""
    if state.runtime == "process":
        what = f"process group {state.pid}"
    else:
        what = f"container {state.container} {(state.container_id or '')[:12]}"
    console.print(f"started {escape(state.profile)} ({what}); log {escape(state.log_path)}")
    console.print(f"[dim]{escape(quote_words(state.argv))}[/dim]")


@contextlib.contextmanager
def stage_progress(console: Console) -> Iterator[Callable[[str, float], None]]:
    """A progress bar over the startup stages; yields the `on_stage(stage, elapsed_s)` callback
    that advances it and prints each stage reached with its time. Draws only: the caller
    follows the engine and calls the callback."""
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task(STAGE_LABELS["starting"], total=len(STAGES) - 1)

        def on_stage(stage: str, elapsed: float) -> None:
            progress.update(task, completed=STAGES.index(stage), description=STAGE_LABELS[stage])
            progress.console.print(f"  [{elapsed:7.1f} s] {STAGE_LABELS[stage]}")

        yield on_stage


def print_ready(
    console: Console,
    state: EngineState,
    outcome: StartupOutcome,
    analysis: LogAnalysis,
    served: str | None,
) -> None:
    """Readiness, the served model, and the capacity the engine reported."""
    serving = f" serving {escape(served)}" if served else ""
    console.print(
        f"[bold green]ready[/bold green] in {outcome.elapsed_s:.0f} s at {state.url}{serving}"
    )
    for line in capacity_lines(analysis):
        console.print(f"  {line}")
