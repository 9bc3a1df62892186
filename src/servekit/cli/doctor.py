"""`servekit doctor` (shell): check this machine and a profile before a long launch."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
    stdout_console,
)
from servekit.errors import ChecksFailed
from servekit.names import RUNTIMES


@click.command("doctor")
@click.argument("profile")
@click.option(
    "--runtime",
    type=click.Choice(RUNTIMES),
    default="docker",
    show_default=True,
    help="How the engine will be launched: docker needs a docker engine, process does not.",
)
@click.option(
    "--model-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The model's directory on this machine (default: the profile's path through "
    "deploy.host_model_dir).",
)
@click.option("--strict", is_flag=True, help="Exit 3 on warnings too, not only on errors.")
@set_option
@profiles_dir_option
@json_option
def doctor_command(
    profile: str,
    runtime: str,
    model_dir: Path | None,
    strict: bool,
    overrides: tuple[str, ...],
    profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Check GPUs (NVML), docker, /dev/shm, the model files and known engine issues.

    Findings have a severity: error (the launch will fail or misbehave), warning, or
    info. Exit code 3 when any finding is an error (with --strict, also a warning).
    """
    from servekit.doctor.run import examine
    from servekit.profiles import load_profile
    from servekit.report.doctor_view import print_doctor

    prof = load_profile(profile, extra_dirs=profiles_dirs, overrides=overrides)
    result = examine(prof, runtime=runtime, model_dir=model_dir, strict=strict)
    if as_json:
        emit_json(result.document().as_json())
    else:
        print_doctor(stdout_console(), result)
    if result.exit_code:
        raise ChecksFailed(
            f"doctor found problems with {prof.name}",
            fix="address the findings above",
            reported=True,
        )
