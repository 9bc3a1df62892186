"""`servekit logs` (shell): show a launched engine's log, or analyze any vLLM log.

`servekit logs PROFILE [--follow]` prints the log of the engine `servekit up` started;
`servekit logs analyze FILE` reads a startup or crash log: the figures, every failure
line, and the known issues they match with their fixes.
"""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._engine import known_engine, state_dir_option
from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    stdout_console,
)
from servekit.errors import ChecksFailed, StartupLogError


class _LogsGroup(click.Group):
    """A group whose unknown first word is a profile: `logs PROFILE` means `logs show PROFILE`."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().resolve_command(ctx, args)


@click.group("logs", cls=_LogsGroup)
def logs_group() -> None:
    """Show a launched engine's log (logs PROFILE [--follow]) or analyze a log file."""


@logs_group.command("show")
@click.argument("profile")
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing new lines until the engine stops."
)
@click.option("-n", "--tail", type=click.IntRange(min=0), help="Print only the last N lines first.")
@state_dir_option
@profiles_dir_option
def show_command(
    profile: str,
    follow: bool,
    tail: int | None,
    state_dir: Path | None,
    profiles_dirs: tuple[str, ...],
) -> None:
    """Print the log of the engine `servekit up PROFILE` started (also: servekit logs PROFILE)."""
    from servekit.runtime.follow import show_log
    from servekit.runtime.state import state_dir as default_state_dir

    _, state = known_engine(state_dir or default_state_dir(None), profile, profiles_dirs)
    click.get_current_context().exit(show_log(state, tail=tail, follow=follow, echo=click.echo))


@logs_group.command("analyze")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--gpu",
    help="GPU model from the catalog (e.g. A800-80GB-SXM), so issues limited to some "
    "compute capabilities can be ruled in or out; the log does not say.",
)
@click.option("--quantization", help="Checkpoint quantization (e.g. mxfp8), if known.")
@json_option
def analyze_command(file: Path, gpu: str | None, quantization: str | None, as_json: bool) -> None:
    """Read a vLLM log: startup figures, failure lines and the known issues they match.

    Exit 0 for a log without failures, 3 when the log holds a failure signature
    (illegal memory access, CUDA OOM, a dead engine, max_model_len not fitting...).
    """
    from servekit.cli._log_file import log_line_batches
    from servekit.doctor.log_analysis import LogAnalyzer, log_analysis_document
    from servekit.hardware import lookup_gpu
    from servekit.report.log_view import print_analysis

    capability = lookup_gpu(gpu).compute_capability if gpu else None
    analyzer = LogAnalyzer(compute_capability=capability, quantization=quantization)
    for lines in log_line_batches(file):  # streamed: a log of any size, bounded memory
        analyzer.feed(lines)
    analysis = analyzer.finish()
    if not analysis.figures.found_any and not analysis.issues:
        raise StartupLogError(
            f"{file} holds no vLLM startup figures or failure lines",
            fix="pass the engine's whole log (stdout and stderr)",
        )
    if as_json:
        emit_json(log_analysis_document(analysis).as_json())
    else:
        print_analysis(stdout_console(), analysis, str(file))
    if analysis.failed:
        raise ChecksFailed(
            f"{file} holds a failure", fix="see the known issues above", reported=True
        )
