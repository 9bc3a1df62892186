"""`servekit bench --resummarize DIR` (shell): rebuild a stopped run's summary, warn on stderr."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.bench.resummarize import resummarize
from servekit.bench.store import RECORDS_FILE, RUN_INFO_FILE, dropped_warning
from servekit.results.summary import Summary


def rebuild_summary(run_dir: Path, *, force: bool) -> Summary:
    """Rebuild DIR's summary files; a skipped torn records line is one warning line, and
    a summary rebuilt from records alone another, saying what is not known."""
    summary, dropped = resummarize(run_dir, force=force)
    if dropped:
        warning = dropped_warning(run_dir / RECORDS_FILE, dropped)
        click.echo(f"servekit: warning: {warning}", err=True)
    if summary.unknown:
        click.echo(
            f"servekit: warning: {run_dir} has no {RUN_INFO_FILE}: the summary is rebuilt "
            f"from {RECORDS_FILE} alone; not known: {'; '.join(summary.unknown)}",
            err=True,
        )
    return summary
