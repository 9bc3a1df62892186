"""`servekit plan` (shell): the per-GPU memory budget of a profile, optionally against a log."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._log_file import log_line_batches
from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
    stdout_console,
)
from servekit.cli._values import FiniteFloat
from servekit.errors import PlanError, StartupLogError
from servekit.hardware import lookup_gpu
from servekit.plan import make_plan, plan_inputs, plan_to_json
from servekit.plan.checkpoint import architecture_from_config, read_checkpoint
from servekit.plan.fit import NON_TORCH_INCREASE_BYTES, misfit_parts
from servekit.plan.reconcile import reconcile, reconcile_to_json
from servekit.plan.startup_log import LogFailure, StartupLogScanner
from servekit.profiles import load_profile
from servekit.report.plan_view import plan_view
from servekit.results.plan import CheckpointBlock
from servekit.units import GIB

MAX_NON_TORCH_GIB = 1024.0


@click.command("plan")
@click.argument("profile")
@set_option
@click.option(
    "--from-log",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A vLLM startup log: show planned versus actual side by side.",
)
@click.option(
    "--model-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A local checkpoint: read config.json and safetensors headers for the facts.",
)
@click.option(
    "--non-torch-gib",
    type=FiniteFloat(min=0, max=MAX_NON_TORCH_GIB),
    default=NON_TORCH_INCREASE_BYTES / GIB,
    show_default=True,
    help="Non-torch memory vLLM's profiling adds per GPU.",
)
@profiles_dir_option
@json_option
def plan_command(
    profile: str,
    overrides: tuple[str, ...],
    from_log: Path | None,
    model_dir: Path | None,
    non_torch_gib: float,
    profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Plan per-GPU memory: weights, activations, CUDA graphs, KV cache and capacity."""
    prof = load_profile(profile, extra_dirs=profiles_dirs, overrides=overrides)
    checkpoint = read_checkpoint(model_dir) if model_dir else None
    arch = architecture_from_config(checkpoint.config) if checkpoint else None
    plan = make_plan(
        plan_inputs(prof, lookup_gpu(prof.hardware.gpu), arch), non_torch_bytes=non_torch_gib * GIB
    )
    rows = None
    failures: tuple[LogFailure, ...] = ()
    if from_log is not None:
        scanner = StartupLogScanner()
        for lines in log_line_batches(from_log):
            scanner.feed(lines)
        figures = scanner.finish()
        if not figures.found_any:
            raise StartupLogError(
                f"{from_log} holds no vLLM startup figures",
                fix="pass the engine's full startup log",
            )
        rows = reconcile(plan, figures)
        failures = figures.failures
    if as_json:
        document = plan_to_json(plan)
        if rows is not None:
            document = document.model_copy(update={"from_log": reconcile_to_json(rows, failures)})
        if checkpoint is not None:
            block = CheckpointBlock(total_bytes=checkpoint.total_bytes,
                                    group_bytes=checkpoint.group_bytes)  # fmt: skip
            document = document.model_copy(update={"checkpoint": block})
        emit_json(document.as_json())
    else:
        stdout_console().print(plan_view(plan, rows, failures, checkpoint))
    if not plan.fits:
        message, fix = misfit_parts(plan)
        raise PlanError(message, fix=fix)
