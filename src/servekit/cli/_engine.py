"""What `up` recorded, for the commands that act on it (shell): down, status, logs."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servekit.errors import ConfigError

if TYPE_CHECKING:
    from servekit.runtime.state import EngineState

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

state_dir_option: Callable[[Callable[..., Any]], Callable[..., Any]] = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where state files and engine logs live (default $SERVEKIT_STATE_DIR, else "
    "$XDG_STATE_HOME/servekit, else ~/.local/state/servekit).",
)


def known_engine(
    directory: Path, profile: str, profiles_dirs: tuple[str, ...]
) -> tuple[str, EngineState]:
    """The state `up` recorded for a profile given by name or by file.

    Raises:
        ConfigError: `up` has not started an engine for it (in this state directory).
    """
    from servekit.profiles import load_profile
    from servekit.runtime.state import read_state, state_path

    # A profile name is a state file name; a path to a profile file is loaded for its name.
    by_name = _NAME.fullmatch(profile) is not None and not profile.endswith((".yaml", ".yml"))
    name = profile if by_name else load_profile(profile, extra_dirs=profiles_dirs).name
    state = read_state(directory, name)
    if state is None:
        raise ConfigError(
            f"no engine started by servekit up for {name} (no {state_path(directory, name)})",
            fix=f"servekit up {name}, or pass the --state-dir up used",
        )
    return name, state
