"""`servekit image build` (shell): build a profile's patched engine image with docker."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
)


@click.group("image")
def image_group() -> None:
    """Engine images: build a profile's patched vLLM image."""


@image_group.command("build")
@click.argument("profile")
@click.option(
    "--dry-run", is_flag=True, help="Write the context and print the Dockerfile and command only."
)
@click.option(
    "--context",
    "context_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the build context here and keep it (default: a temporary directory, "
    "removed after a successful build).",
)
@click.option(
    "--allow-skipped-compiled",
    is_flag=True,
    help="Build even when a patch changes compiled sources (csrc/, CUDA, C++, CMake); "
    "those changes are left out with a warning.",
)
@set_option
@profiles_dir_option
@json_option
def build_command(
    profile: str,
    dry_run: bool,
    context_dir: Path | None,
    allow_skipped_compiled: bool,
    overrides: tuple[str, ...],
    profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Build engine.patched_image_tag: engine.image with the profile's patches applied."""
    from servekit.profiles import load_profile
    from servekit.render.documents import IMAGE_BUILD_VERSION, ImageBuildDocument
    from servekit.render.image import describe_patches, plan_document
    from servekit.runtime.image_build import build_image, prepare_build

    prof = load_profile(profile, extra_dirs=profiles_dirs, overrides=overrides)
    prepared = prepare_build(
        prof,
        context_dir=context_dir,
        cwd=Path.cwd(),
        allow_skipped_compiled=allow_skipped_compiled,
    )
    plan = prepared.plan
    for warning in plan.warnings:
        click.echo(f"servekit: warning: {warning}", err=True)
    command = shlex.join(prepared.argv)
    if not as_json:
        count = len(plan.patches)
        click.echo(f"{plan.tag}: {plan.base_image} with {count} patch{'es' * (count != 1)}")
        for line in describe_patches(plan):
            click.echo(f"  {line}")
        click.echo(f"context: {prepared.context_dir}")
        if dry_run:
            click.echo(f"\n{prepared.dockerfile}\n{command}")
    if not dry_run:
        build_image(prepared, on_output=lambda line: click.echo(line, err=True))
        if not as_json:
            click.echo(f"built {plan.tag}")
    if as_json:
        document = ImageBuildDocument(
            schema_version=IMAGE_BUILD_VERSION,
            image=plan_document(plan),
            context=str(prepared.context_dir),
            context_kept=dry_run or not prepared.temporary,
            dockerfile=prepared.dockerfile,
            command=tuple(prepared.argv),
            dry_run=dry_run,
            built=not dry_run,
        )
        emit_json(document.as_json())
