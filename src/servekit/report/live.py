"""A live per-point progress display for load tests (shell: draws on stderr with rich)."""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from servekit.records import RequestRecord


class LiveProgress:
    """One progress bar per load point: requests done, output tok/s so far, errors."""

    def __init__(self, *, enabled: bool = True, console: Console | None = None) -> None:
        """Draw on `console` (default: a new one on stderr). Elapsed time comes from the
        console's clock (`Console(get_time=...)`), so a fixed clock gives a fixed display."""
        self._progress = Progress(
            TextColumn("{task.description:>12}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>10} tok/s  errors {task.fields[errors]}"),
            console=console or Console(file=sys.stderr),
            disable=not enabled,
            transient=False,
        )
        self._task: TaskID | None = None
        self._started = False
        self._tokens = 0
        self._errors = 0
        self._start = 0.0

    def start_point(self, label: str, total: int) -> None:
        """Begin a new bar for a point of `total` requests."""
        if not self._started:
            self._progress.start()
            self._started = True
        self._tokens = self._errors = 0
        self._start = self._progress.get_time()
        self._task = self._progress.add_task(label, total=total, rate="-", errors=0)

    def record(self, record: RequestRecord) -> None:
        """Advance the current bar by one finished request."""
        if self._task is None:
            return
        self._tokens += record.output_tokens
        self._errors += 0 if record.ok else 1
        elapsed = max(self._progress.get_time() - self._start, 1e-9)
        self._progress.update(
            self._task, advance=1, rate=f"{self._tokens / elapsed:,.0f}", errors=self._errors
        )

    def __enter__(self) -> LiveProgress:
        # The display starts with the first point: a run that fails before any (a server
        # that does not answer) leaves no empty line above its one-line error.
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._started:
            self._progress.stop()
