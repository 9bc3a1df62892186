"""A profile from a model's config, for `profiles new` and `plan --model-config` (shell).

Reads a `config.json` (or a model directory: config and safetensors headers), derives the
facts through `servekit.plan.model_config`, adds vLLM's defaults for the GPU and engine
version (`servekit.plan.new_profile`) and validates the result with the `--set` overrides.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servekit.errors import UsageError
from servekit.names import NEWEST_KNOWN_ENGINE

if TYPE_CHECKING:
    from servekit.plan.checkpoint import CheckpointInfo
    from servekit.profiles import Profile


def model_profile_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--model-config, --gpu, --gpus and --engine-version."""
    for option in reversed(
        [
            click.option(
                "--model-config",
                type=click.Path(exists=True, path_type=Path),
                help="A Hugging Face config.json, or a model directory (config.json and "
                "safetensors headers).",
            ),
            click.option("--gpu", help="GPU name or alias (servekit profiles gpus)."),
            click.option("--gpus", type=click.IntRange(min=1, max=1 << 16), help="GPU count."),
            click.option(
                "--engine-version",
                default=NEWEST_KNOWN_ENGINE,
                show_default=True,
                help="vLLM version whose defaults and accounting to follow (default: the "
                "newest servekit knows).",
            ),
        ]
    ):
        func = option(func)
    return func


def build_profile(
    name: str,
    model_config: Path,
    gpu_name: str | None,
    gpus: int | None,
    engine_version: str,
    overrides: tuple[str, ...],
) -> tuple[Profile, CheckpointInfo | None]:
    """The validated profile for a model config on `gpus` x `gpu_name`.

    Raises:
        UsageError: --gpu or --gpus missing, or a bad --engine-version or --set.
        ConfigError: the config lacks facts, the GPU is unknown, or the settings contradict.
    """
    from servekit.cli._profile_io import read_config_json
    from servekit.hardware import lookup_gpu
    from servekit.plan.checkpoint import CONFIG_FILE, read_checkpoint
    from servekit.plan.model_config import model_facts_from_config
    from servekit.plan.new_profile import (
        check_engine_version,
        fill_serve_defaults,
        new_profile_document,
    )
    from servekit.profiles import profile_from_data

    if not gpu_name or not gpus:
        raise UsageError(
            "--model-config needs --gpu and --gpus",
            fix="e.g. --model-config config.json --gpu h100 --gpus 1",
        )
    version = check_engine_version(engine_version)
    gpu = lookup_gpu(gpu_name)
    checkpoint = read_checkpoint(model_config) if model_config.is_dir() else None
    config = checkpoint.config if checkpoint else read_config_json(model_config)
    facts = model_facts_from_config(config)
    shown = f"{model_config.name}/{CONFIG_FILE}" if checkpoint else model_config.name
    model_path = checkpoint_path(config, model_config, is_dir=checkpoint is not None)
    document = new_profile_document(
        name, facts, config, gpu, gpus, model_path=model_path, engine_version=version,
        from_file=shown,
    )  # fmt: skip
    profile = profile_from_data(
        document,
        overrides=overrides,
        fill=lambda data: fill_serve_defaults(data, config, gpu, gpus),
        # no profile file to correct: the parallel sizes come from --gpus and --set
        whole_fix="choose --gpus (TP = GPUs / (PP x DP)) or --set tensor_parallel_size=N "
        "--set pipeline_parallel_size=M to match, or correct the model config",
    )
    return profile, checkpoint


def checkpoint_path(config: dict[str, Any], model_config: Path, *, is_dir: bool) -> str:
    """model.path for the profile: the model directory given; for a bare config.json its
    `_name_or_path` when that is a Hugging Face repo id (vLLM downloads it), else the
    config's own directory (a path on another machine would not be this checkpoint)."""
    if is_dir:
        return str(model_config.resolve())
    name = config.get("_name_or_path")
    if isinstance(name, str) and _REPO_ID.fullmatch(name):
        return name
    return str(model_config.resolve().parent)


_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
