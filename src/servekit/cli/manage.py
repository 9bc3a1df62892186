"""`servekit down` and `servekit status` (shell): act on exactly what `servekit up` started."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from servekit.cli._engine import known_engine, state_dir_option
from servekit.cli._output import emit_json, json_option, profiles_dir_option, stdout_console
from servekit.cli._values import FiniteFloat
from servekit.errors import ChecksFailed


@click.command("down")
@click.argument("profile")
@click.option("--grace", type=FiniteFloat(min=0), default=30.0, show_default=True,
              help="Seconds to wait after SIGTERM (docker stop -t) before killing.")  # fmt: skip
@state_dir_option
@profiles_dir_option
@json_option
def down_command(
    profile: str, grace: float, state_dir: Path | None, profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:  # fmt: skip
    """Stop exactly the engine `servekit up PROFILE` started (process group or container)."""
    from servekit.runtime.control import stop
    from servekit.runtime.documents import ENGINE_DOC_VERSION, DownDocument
    from servekit.runtime.state import remove_state
    from servekit.runtime.state import state_dir as default_state_dir

    directory = state_dir or default_state_dir(None)
    name, state = known_engine(directory, profile, profiles_dirs)
    done = stop(state, grace_s=grace)
    remove_state(directory, name)
    if as_json:
        emit_json(DownDocument(schema_version=ENGINE_DOC_VERSION, profile=name, stopped=True,
                               detail=done).as_json())  # fmt: skip
    else:
        stdout_console().print(f"{escape(name)}: {escape(done)}")


@click.command("status")
@click.argument("profile")
@state_dir_option
@profiles_dir_option
@json_option
def status_command(
    profile: str, state_dir: Path | None, profiles_dirs: tuple[str, ...], as_json: bool
) -> None:
    """Report whether PROFILE's engine runs, its /health, the served model and uptime.

    Exit 0 when it runs and /health answers 200, 3 otherwise.
    """
    from servekit.runtime.control import engine_status
    from servekit.runtime.state import state_dir as default_state_dir

    name, state = known_engine(state_dir or default_state_dir(None), profile, profiles_dirs)
    status = engine_status(state)
    if as_json:
        emit_json(status.as_json())
    else:
        console = stdout_console()
        verdict = "[bold green]healthy[/]" if status.healthy else "[bold red]not healthy[/]"
        code = status.health or "down"
        console.print(f"{escape(name)}: {verdict} ({escape(status.detail)}, /health {code})")
        if status.served_model is not None:
            console.print(f"  serving {escape(str(status.served_model))}, "
                          f"max_model_len {status.max_model_len}")  # fmt: skip
        minutes, seconds = divmod(int(status.uptime_s), 60)
        console.print(f"  {state.url}, up {minutes // 60}h{minutes % 60:02d}m{seconds:02d}s, "
                      f"log {escape(state.log_path)}")  # fmt: skip
    if not status.healthy:
        raise ChecksFailed(
            f"{name} is not healthy", fix=f"see `servekit logs {name}`", reported=True
        )
