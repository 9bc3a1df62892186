"""`servekit bench --resummarize DIR` (shell): rebuild a stopped run's summary, warn on stderr."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.bench.resummarize import resummarize
from servekit.bench.store import RECORDS_FILE, dropped_warning
from servekit.results.summary import Summary


def rebuild_summary(run_dir: Path, *, force: bool) -> Summary:
    """Rebuild DIR's summary files; a skipped torn records line is one warning line."""
    summary, dropped = resummarize(run_dir, force=force)
    if dropped:
        warning = dropped_warning(run_dir / RECORDS_FILE, dropped)
        click.echo(f"servekit: warning: {warning}", err=True)
    return summary
