"""`servekit profiles list|show` (shell): list and print deployment profiles."""

from __future__ import annotations

import click

from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
    stdout_console,
)
from servekit.cli.profiles_new import new_command


@click.group("profiles")
def profiles_group() -> None:
    """List, show and create deployment profiles (built-in and user YAML files)."""


profiles_group.add_command(new_command)


@profiles_group.command("list")
@profiles_dir_option
@json_option
def list_command(profiles_dirs: tuple[str, ...], as_json: bool) -> None:
    """List every profile with its model, GPUs and engine image."""
    from servekit.profile_index import cached_document

    # The built-in profiles' document comes from their checked index when it matches the
    # files (no profile schema or pydantic loaded: start-up), else every profile is loaded.
    cached = cached_document(profiles_dirs)
    if cached is not None and as_json:
        emit_json(cached)
        return
    if cached is not None:
        rows: list[dict[str, str]] = cached["profiles"]  # type: ignore[assignment]
    else:
        from servekit.report.profile_list import profile_rows, profiles_document

        rows = profile_rows(profiles_dirs)
        if as_json:
            emit_json(profiles_document(rows).as_json())
            return
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    # A name is never split or cut (it is what the other commands take); the rest folds.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True, min_width=max(len(r["name"]) for r in rows))
    for column in ("gpus", "image", "description"):
        table.add_column(column, overflow="fold")
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
    if as_json:
        from servekit.profiles.documents import PROFILE_SHOW_VERSION, ProfileDocument

        emit_json(ProfileDocument(schema_version=PROFILE_SHOW_VERSION, profile=profile).as_json())
        return
    import yaml

    document = profile.model_dump(mode="json", by_alias=True, exclude_none=True)
    click.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)


@profiles_group.command("gpus")
@json_option
def gpus_command(as_json: bool) -> None:
    """List the GPU catalog: names, the aliases that find them, memory vLLM budgets from."""
    from servekit.hardware import load_catalog
    from servekit.hardware.catalog import gpu_aliases
    from servekit.results.profiles import PROFILES_VERSION, GpuRow, GpusDocument

    aliases = gpu_aliases()
    rows = tuple(
        GpuRow(name=g.name, device_name=g.device_name, memory_mib=g.memory_mib,
               cuda_visible_mib=g.cuda_visible_mib, unified_memory=g.unified_memory,
               aliases=tuple(aliases[g.name]))
        for g in sorted(load_catalog().values(), key=lambda g: g.name)
    )  # fmt: skip
    if as_json:
        emit_json(GpusDocument(schema_version=PROFILES_VERSION, gpus=rows).as_json())
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        "name", "nvidia-smi MiB", "CUDA total MiB", "finds it (case, -, _, space ignored)"
    )
    for r in rows:
        table.add_row(r.name, str(r.memory_mib), str(r.cuda_visible_mib),
                      escape(", ".join(r.aliases)))  # fmt: skip
    stdout_console().print(table)
