"""`servekit profiles new` (shell): write a validated profile from a model's config.json."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._model_profile import model_profile_options
from servekit.cli._output import set_option
from servekit.errors import UsageError


@click.command("new")
@click.argument("name")
@model_profile_options
@set_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the profile to FILE (named NAME.yaml); without it the YAML goes to stdout.",
)
def new_command(
    name: str,
    model_config: Path | None,
    gpu: str | None,
    gpus: int | None,
    engine_version: str,
    overrides: tuple[str, ...],
    output: Path | None,
) -> None:
    """Write profile NAME for a model config on GPUS x GPU, vLLM's defaults filled in.

    --set takes serve arguments in vLLM's spelling (tensor_parallel_size, max_model_len,
    gpu_memory_utilization, kv_cache_dtype, max_num_seqs, quantization, ...); what is
    not set gets that vLLM version's default, and model.sources says where each came from.
    """
    from servekit.bench.store import write_atomically
    from servekit.cli._model_profile import build_profile
    from servekit.cli._profile_io import profile_yaml
    from servekit.profiles import check_profile_output
    from servekit.profiles.schema import profile_name_problem, safe_profile_name

    if model_config is None:
        raise UsageError("profiles new needs --model-config PATH", fix="give a config.json")
    if (problem := profile_name_problem(name)) is not None:
        raise UsageError(f"NAME {name!r} is not a profile name: {problem}",
                         fix=f"use e.g. {safe_profile_name(name)}")  # fmt: skip
    if output is not None:
        check_profile_output(output)
        if output.stem != name:
            raise UsageError(
                f"-o {output.name} is not named after the profile {name!r}",
                fix=f"use -o {output.with_name(name + output.suffix)}",
            )
        if output.exists():
            raise UsageError(
                f"-o {output.name} exists", fix="remove it first or choose another -o path"
            )
    profile, _ = build_profile(name, model_config, gpu, gpus, engine_version, overrides)
    text = profile_yaml(profile)
    if output is None:
        click.echo(text, nl=False)
        return
    write_atomically(output, text)
    click.echo(f"wrote {output}", err=True)
