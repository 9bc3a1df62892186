"""`servekit doctor` for people (view, rich): one line per finding, its evidence and fix."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from servekit.doctor.findings import summarize
from servekit.doctor.run import Examination

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}
_PAD = " " * 20


def print_doctor(console: Console, result: Examination) -> None:
    """Findings, most serious first, then the counts and the exit code."""
    console.print(f"[bold]servekit doctor: {escape(result.profile.name)}[/bold]")
    for f in result.findings:
        label = f"[{_STYLE[f.severity]}]{f.severity:<7}[/] {f.check:<11}"
        console.print(f"{label} {escape(f.title)}")
        if f.detail:
            console.print(f"{_PAD}[dim]{escape(f.detail)}[/dim]")
        if f.fix:
            console.print(f"{_PAD}[bold]fix:[/bold] {escape(f.fix)}")
    counts = summarize(result.findings)
    verdict = "problems found" if result.exit_code else "ready"
    console.print(
        f"{verdict}: {counts['error']} error(s), {counts['warning']} warning(s), "
        f"{counts['info']} info (exit {result.exit_code})"
    )
