"""What `servekit up` started, on disk (shell): one JSON state file per profile.

The state file lets `down`, `status` and `logs` act on exactly what `up` started: a
process group (by its leader's pid, checked against the leader's creation time so a
recycled pid is never signalled) or a container (by id). It holds no secrets: the
environment is recorded by variable name only. Files live in `$SERVEKIT_STATE_DIR`, else
`$XDG_STATE_HOME/servekit`, else `~/.local/state/servekit`.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
from pydantic import ValidationError

from servekit.errors import ConfigError
from servekit.runtime.documents import EngineState as EngineState

STATE_ENV = "SERVEKIT_STATE_DIR"


def state_dir(explicit: Path | None = None) -> Path:
    """The directory state files and engine logs live in (not created here)."""
    if explicit is not None:
        return explicit
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "servekit"


def state_path(directory: Path, profile: str) -> Path:
    """The state file of one profile (profile names are safe file names by schema)."""
    return directory / f"{profile}.json"


def log_path(directory: Path, profile: str) -> Path:
    """The engine log file of one profile."""
    return directory / f"{profile}.log"


def write_state(directory: Path, state: EngineState) -> Path:
    """Write the state file atomically (a reader never sees half a file)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_path(directory, state.profile)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(state.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_state(directory: Path, profile: str) -> EngineState | None:
    """The state of one profile's engine, or None when `up` has not started one.

    Raises:
        ConfigError: the file exists but is not a servekit state file.
    """
    path = state_path(directory, profile)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the state file {path}: {exc}",
            fix=f"check its permissions, or stop the engine by hand and delete {path}",
        ) from None
    try:
        return EngineState.model_validate_json(text)
    except ValidationError as exc:
        raise ConfigError(
            f"{path} is not a servekit state file ({exc.error_count()} problem(s))",
            fix=f"check what runs, stop it by hand, then delete {path}",
        ) from None


def remove_state(directory: Path, profile: str) -> None:
    """Forget an engine (its log stays)."""
    state_path(directory, profile).unlink(missing_ok=True)


def process_identity(pid: int) -> tuple[float | None, bool]:
    """A process's creation time (Unix seconds) and whether it is alive (not a zombie).

    `(None, False)` when no process has the pid. A zombie keeps its creation time, so an
    engine that exited before its start was recorded is still recognised as ours.
    """
    try:
        process = psutil.Process(pid)
        created = float(process.create_time())
        alive = process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return None, False
    return created, alive


def group_alive(pgid: int) -> list[int]:
    """The live (non-zombie) processes of a process group."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() not in (
                psutil.STATUS_ZOMBIE,
                psutil.STATUS_DEAD,
            ):
                members.append(process.pid)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return members
