"""`servekit plan` (shell): the per-GPU memory budget of a profile, optionally against a log."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._model_profile import model_profile_options
from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
    stdout_console,
)
from servekit.cli._values import FiniteFloat
from servekit.errors import PlanError
from servekit.units import GIB

MAX_NON_TORCH_GIB = 1024.0
# The planner's own allowance (plan.fit's NON_TORCH_INCREASE_BYTES), named here without
# importing the planner, so --help stays cheap; a test checks the two agree.
NON_TORCH_DEFAULT_TEXT = "0.25, the planner's"
_LOG = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command("plan")
@click.argument("profile", required=False)
@model_profile_options
@set_option
@click.option("--from-log", type=_LOG, help="A vLLM startup log: planned versus actual.")
@click.option(
    "--calibrate-from-log",
    type=_LOG,
    help="Write the log's measured overheads and CUDA graphs into PROFILE's file for its GPU and "
    "version (the log must be of the plan's vLLM version and gpu_memory_utilization).",
)
@click.option(
    "--model-dir",
    type=click.Path(path_type=Path),  # checked by servekit: doctor's words for what is there
    help="A local checkpoint: read config.json and safetensors headers for the facts.",
)
@click.option(
    "--non-torch-gib",
    type=FiniteFloat(min=0, max=MAX_NON_TORCH_GIB),
    show_default=NON_TORCH_DEFAULT_TEXT,
    help="Non-torch memory vLLM's profiling adds per GPU (unless the profile has a measured one).",
)
@profiles_dir_option
@json_option
def plan_command(
    profile: str | None,
    model_config: Path | None,
    gpu: str | None,
    gpus: int | None,
    engine_version: str,
    overrides: tuple[str, ...],
    from_log: Path | None,
    calibrate_from_log: Path | None,
    model_dir: Path | None,
    non_torch_gib: float | None,
    profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Plan per-GPU memory: weights, activations, CUDA graphs, KV cache and capacity.

    Plan PROFILE, or a model straight from --model-config PATH --gpu GPU --gpus N.
    """
    from servekit.cli._plan_source import (
        calibrate_profile,
        check_model_dir,
        plan_profile,
        read_figures,
    )
    from servekit.hardware import lookup_gpu
    from servekit.plan import plan_inputs, plan_to_json
    from servekit.plan.calibrate import calibrated_plan
    from servekit.plan.checkpoint import architecture_from_config, read_checkpoint
    from servekit.plan.fit import NON_TORCH_INCREASE_BYTES, misfit_parts
    from servekit.plan.reconcile import attribute_kv, log_mismatches, reconcile, reconcile_to_json
    from servekit.report.plan_view import plan_view
    from servekit.results.plan import CheckpointBlock

    if model_dir is not None:
        check_model_dir(model_dir)
    args = (profile, model_config, gpu, gpus, engine_version, overrides, profiles_dirs)
    prof, checkpoint = plan_profile(*args)
    checkpoint = read_checkpoint(model_dir) if model_dir else checkpoint
    arch = architecture_from_config(checkpoint.config) if model_dir and checkpoint else None
    inputs = plan_inputs(prof, lookup_gpu(prof.hardware.gpu), arch)
    non_torch = NON_TORCH_INCREASE_BYTES if non_torch_gib is None else non_torch_gib * GIB
    plan, measured = calibrated_plan(prof, inputs, non_torch)
    log = from_log or calibrate_from_log
    figures = read_figures(log) if log else None
    if calibrate_from_log is not None and figures is not None:
        written = calibrate_profile(profile, profiles_dirs, plan, prof, figures, calibrate_from_log)
        click.echo(f"wrote measured overheads for {inputs.gpu.name} into {written.name}", err=True)
    rows = reconcile(plan, figures) if figures else None
    failures = figures.failures if figures else ()
    explained = attribute_kv(plan, figures) if figures else None
    mismatches = log_mismatches(plan, figures) if figures else ()
    if as_json:
        document = plan_to_json(plan)
        if rows is not None:
            logged = reconcile_to_json(rows, failures, explained, mismatches)
            document = document.model_copy(update={"from_log": logged})
        if checkpoint is not None:
            block = CheckpointBlock(total_bytes=checkpoint.total_bytes,
                                    group_bytes=checkpoint.group_bytes)  # fmt: skip
            document = document.model_copy(update={"checkpoint": block})
        emit_json(document.as_json())
    else:
        view = plan_view(plan, rows, failures, checkpoint, explained, measured, mismatches)
        stdout_console().print(view)
    if not plan.fits:
        message, fix = misfit_parts(plan)
        raise PlanError(message, fix=fix)
