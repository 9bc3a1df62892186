"""`servekit profiles list|show` (shell): list and print deployment profiles."""

from __future__ import annotations

import click
import yaml
from rich.markup import escape
from rich.table import Table

from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
    stdout_console,
)
from servekit.cli.profiles_new import new_command
from servekit.errors import ServekitError


@click.group("profiles")
def profiles_group() -> None:
    """List, show and create deployment profiles (built-in and user YAML files)."""


profiles_group.add_command(new_command)


@profiles_group.command("list")
@profiles_dir_option
@json_option
def list_command(profiles_dirs: tuple[str, ...], as_json: bool) -> None:
    """List every profile with its model, GPUs and engine image."""
    from servekit.profiles import available_profiles, load_profile
    from servekit.render import container_image

    rows: list[dict[str, str]] = []
    for ref in available_profiles(profiles_dirs).values():
        try:
            p = load_profile(str(ref.path), extra_dirs=profiles_dirs)
        except ServekitError as exc:  # one broken user file must not hide the others
            source = "built-in" if ref.builtin else str(ref.path)
            rows.append({"name": ref.name, "source": source, "error": str(exc)})
            continue
        rows.append(
            {
                "name": p.name,
                "source": "built-in" if ref.builtin else str(ref.path),
                "model": p.model.path,
                "gpus": f"{p.hardware.nodes * p.hardware.gpus_per_node}x {p.hardware.gpu}",
                "image": container_image(p),
                "description": p.description,
            }
        )
    if as_json:
        emit_json({"profiles": rows})
        return
    table = Table("name", "gpus", "image", "description")
    for row in rows:
        if "error" in row:
            table.add_row(row["name"], "-", "-", f"[red]invalid: {escape(row['error'])}[/red]")
        else:
            table.add_row(row["name"], row["gpus"], row["image"], escape(row["description"]))
    stdout_console().print(table)


@profiles_group.command("show")
@click.argument("name")
@set_option
@profiles_dir_option
@json_option
def show_command(
    name: str, overrides: tuple[str, ...], profiles_dirs: tuple[str, ...], as_json: bool
) -> None:
    """Print a profile with `extends:` merged and overrides applied, as YAML (or JSON)."""
    from servekit.profiles import load_profile

    profile = load_profile(name, extra_dirs=profiles_dirs, overrides=overrides)
    document = profile.model_dump(mode="json", by_alias=True, exclude_none=True)
    if as_json:
        emit_json(document)
        return
    click.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)


@profiles_group.command("gpus")
@json_option
def gpus_command(as_json: bool) -> None:
    """List the GPU catalog: names, the aliases that find them, memory vLLM budgets from."""
    from servekit.hardware import load_catalog
    from servekit.hardware.catalog import gpu_aliases

    aliases = gpu_aliases()
    rows: list[dict[str, object]] = [
        {"name": g.name, "device_name": g.device_name, "memory_mib": g.memory_mib,
         "cuda_visible_mib": g.cuda_visible_mib, "unified_memory": g.unified_memory,
         "aliases": aliases[g.name]}
        for g in sorted(load_catalog().values(), key=lambda g: g.name)
    ]  # fmt: skip
    if as_json:
        emit_json({"gpus": rows})
        return
    table = Table(
        "name", "nvidia-smi MiB", "CUDA total MiB", "finds it (case, -, _, space ignored)"
    )
    for r in rows:
        table.add_row(str(r["name"]), str(r["memory_mib"]), str(r["cuda_visible_mib"]),
                      escape(", ".join(aliases[str(r["name"])])))  # fmt: skip
    stdout_console().print(table)
