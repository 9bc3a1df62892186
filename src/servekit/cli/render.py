"""`servekit render` (shell): write a profile's launch artifact for one target."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
)
from servekit.errors import ConfigError
from servekit.names import TARGETS


@click.command("render")
@click.argument("profile")
@click.option(
    "--target",
    type=click.Choice(TARGETS),
    default="vllm",
    show_default=True,
    help="Artifact to render.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file instead of stdout.",
)
@set_option
@profiles_dir_option
@json_option
def render_command(
    profile: str,
    target: str,
    output: Path | None,
    overrides: tuple[str, ...],
    profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Render exact launch artifacts: vllm serve args, docker run, compose, k8s or a script."""
    from servekit.profiles import load_profile
    from servekit.render import render, vllm_serve_command
    from servekit.render.documents import RENDER_VERSION, RenderDocument

    prof = load_profile(profile, extra_dirs=profiles_dirs, overrides=overrides)
    text = render(prof, target)
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
            if target == "script":
                output.chmod(0o755)
        except OSError as exc:
            raise ConfigError(
                f"cannot write {output}: {exc.strerror}", fix="choose a writable -o path"
            ) from None
    if as_json:
        document = RenderDocument(
            schema_version=RENDER_VERSION,
            profile=prof.name,
            target=target,
            content=text,
            argv=tuple(vllm_serve_command(prof)),
            env=dict(prof.env),
            output=str(output) if output else None,
        )
        emit_json(document.as_json())
    elif output is None:
        click.echo(text, nl=not text.endswith("\n"))
    else:
        click.echo(f"wrote {output}", err=True)
