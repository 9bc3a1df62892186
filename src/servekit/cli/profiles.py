"""`servekit profiles list|show` (shell): list and print deployment profiles."""

from __future__ import annotations

import click
import yaml
from rich.table import Table

from servekit.cli._output import (
    emit_json,
    handles_errors,
    json_option,
    profiles_dir_option,
    stdout_console,
)
from servekit.profiles import available_profiles, load_profile


@click.group("profiles")
def profiles_group() -> None:
    """List and show deployment profiles (built-in and user YAML files)."""


@profiles_group.command("list")
@profiles_dir_option
@json_option
@handles_errors
def list_command(profiles_dirs: tuple[str, ...], as_json: bool) -> None:
    """List every profile with its model, GPUs and engine image."""
    rows = []
    for ref in available_profiles(profiles_dirs).values():
        p = load_profile(str(ref.path), extra_dirs=profiles_dirs)
        rows.append(
            {
                "name": p.name,
                "source": "built-in" if ref.builtin else str(ref.path),
                "model": p.model.path,
                "gpus": f"{p.hardware.nodes * p.hardware.gpus_per_node}x {p.hardware.gpu}",
                "image": p.engine.patched_image_tag or p.engine.image,
                "description": p.description,
            }
        )
    if as_json:
        emit_json({"profiles": rows})
        return
    table = Table("name", "gpus", "image", "description")
    for row in rows:
        table.add_row(row["name"], row["gpus"], row["image"], row["description"])
    stdout_console().print(table)


@profiles_group.command("show")
@click.argument("name")
@profiles_dir_option
@json_option
@handles_errors
def show_command(name: str, profiles_dirs: tuple[str, ...], as_json: bool) -> None:
    """Print a profile with `extends:` merged, as YAML (or JSON)."""
    profile = load_profile(name, extra_dirs=profiles_dirs)
    document = profile.model_dump(mode="json", by_alias=True, exclude_none=True)
    if as_json:
        emit_json(document)
        return
    click.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)
