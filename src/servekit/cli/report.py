"""`servekit report RUN... --out DIR` (shell): a self-contained HTML page, Markdown, PNGs."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._output import emit_json, json_option
from servekit.cli._values import FiniteFloat
from servekit.errors import UsageError


@click.command("report")
@click.argument("runs", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--compare", nargs=2, type=click.Path(exists=True, path_type=Path),
              metavar="RUN_A RUN_B", help="Add the A/B comparison of two runs.")  # fmt: skip
@click.option("--validate", "validate_path", type=click.Path(exists=True, path_type=Path),
              help="validate.json (or its --out DIR) to include [found in runs].")  # fmt: skip
@click.option("--per-stream-target", type=FiniteFloat(min=0, min_open=True),
              help="Per-stream tok/s target line [the profile's bench target].")  # fmt: skip
@click.option(
    "--tune",
    "tune_path",
    type=click.Path(exists=True, path_type=Path),
    help="A servekit tune --out directory (or its tune.json): its section and winner.",
)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@json_option
def report_command(
    runs: tuple[Path, ...],
    compare: tuple[Path, Path] | None,
    validate_path: Path | None,
    per_stream_target: float | None,
    tune_path: Path | None,
    out: Path,
    as_json: bool,
) -> None:
    """Write report.html (self-contained), report.md and PNG plots for one or more runs
    (and a servekit tune run with --tune)."""
    from servekit.bench.store import read_tune
    from servekit.report.build import write_report

    if not runs and tune_path is None:
        raise UsageError("report needs a run directory or --tune DIR", fix="give one or both")
    tune = read_tune(tune_path) if tune_path is not None else None

    def warn(line: str) -> None:
        click.echo(f"servekit: warning: {line}", err=True)

    written = write_report(list(runs), out, compare=compare or None, validate=validate_path,
                           per_stream_target=per_stream_target, tune=tune, warn=warn)  # fmt: skip
    if as_json:
        emit_json(written.as_json())
    else:
        click.echo(f"report: {written.html} ({len(written.plots)} plots), {written.markdown}")
