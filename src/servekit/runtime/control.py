"""Is the engine up, and stopping it (shell): liveness, /health, status, down.

A process engine is its process group: the leader `up` started (vLLM's API server) and
everything it spawned (engine core, workers). The leader is recognised by its pid and
creation time together; a pid now held by another process is never signalled. Linux does
not hand out a pid while a process group of that number exists, so once the leader is
gone, the members left in its group are the engine's own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from servekit.client.probe import health as health
from servekit.client.probe import served_models as served_models
from servekit.errors import ConfigError, LaunchError
from servekit.runtime.docker_cli import (
    DOCKER_TIMEOUT_S,
    container_id_of,
    docker,
    is_gone,
    last_line,
)
from servekit.runtime.documents import ENGINE_DOC_VERSION, StatusDocument
from servekit.runtime.state import EngineState, group_alive, process_identity

IDENTITY_TOLERANCE_S = 1.0
"""Creation times are wall-clock derived; a clock step moves them. A new process that
takes the same pid within a second of the old one's start is not a real risk."""


@dataclass(frozen=True, slots=True)
class Liveness:
    """Whether what `up` started still runs.

    Attributes:
        running: the leader process or the container runs.
        exit_code: the container's exit code, when docker knows it.
        detail: a phrase for people.
        foreign: the recorded pid belongs to another process now (never signal it).
    """

    running: bool
    exit_code: int | None = None
    detail: str = ""
    foreign: bool = False


def liveness(state: EngineState) -> Liveness:
    """Ask the OS (process) or docker (container) whether the engine still runs."""
    if state.runtime == "docker":
        return _container_liveness(state)
    if state.pid is None:
        return Liveness(False, detail="no pid recorded")
    created, live = process_identity(state.pid)
    if created is None:
        return Liveness(False, detail=f"process {state.pid} has exited")
    same = state.pid_started_at is not None and (
        abs(created - state.pid_started_at) <= IDENTITY_TOLERANCE_S
    )
    if not same:
        return Liveness(False, detail=f"pid {state.pid} now belongs to another process",
                        foreign=True)  # fmt: skip
    if not live:
        return Liveness(False, detail=f"process {state.pid} has exited")
    return Liveness(True, detail=f"pid {state.pid}")


def _container_liveness(state: EngineState) -> Liveness:
    ident = state.container_id or ""
    result = docker(["inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", ident],
                    what="docker inspect", check=False)  # fmt: skip
    if is_gone(result):
        return Liveness(False, detail=f"container {state.container} is gone")
    if result.returncode != 0:
        raise LaunchError(f"docker inspect {state.container} failed: {last_line(result)}",
                          fix="check the docker daemon (docker info)")  # fmt: skip
    running, _, code = result.stdout.strip().partition(" ")
    if running == "true":
        return Liveness(True, detail=f"container {state.container}")
    exit_code = int(code) if code.strip().lstrip("-").isdigit() else None
    return Liveness(False, exit_code, f"container {state.container} has exited")


def engine_status(state: EngineState) -> StatusDocument:
    """What `servekit status` reports: the state, running, /health, served model, uptime.

    The served model's id and max_model_len come from the server: a value of the wrong type
    is reported as unknown (None), not trusted.
    """
    alive = liveness(state)
    code = health(state.url) if alive.running else None
    models = served_models(state.url) if code == 200 else []
    model = models[0] if models else {}
    return StatusDocument(
        schema_version=ENGINE_DOC_VERSION,
        engine=state,
        running=alive.running,
        healthy=alive.running and code == 200,
        detail=alive.detail,
        health=code,
        served_model=served_model_id(models),
        max_model_len=_int_or_none(model.get("max_model_len")),
        uptime_s=round(state.uptime_s(time.time()), 1),
    )


def served_model_id(models: list[dict[str, Any]]) -> str | None:
    """The first listed model's id when it is a string, else None."""
    name = models[0].get("id") if models else None
    return name if isinstance(name, str) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def stop(state: EngineState, *, grace_s: float = 30.0) -> str:
    """Stop exactly what `up` started; returns what was done.

    Process runtime: SIGTERM to the process group, SIGKILL after `grace_s`, until no
    member of the group is left; a pid that belongs to another process now is left
    alone. Docker: `docker stop -t GRACE` then `docker rm -f`.

    Raises:
        LaunchError: the engine could not be stopped, or docker failed for another
            reason than the container being gone.
    """
    if state.runtime == "docker":
        return _stop_container(state, grace_s)
    if state.pid is None:
        raise ConfigError("the state file has no pid", fix="stop the engine by hand")
    alive = liveness(state)
    if alive.foreign:
        return f"nothing signalled: {alive.detail}; the engine is gone"
    if not alive.running:
        left = stop_group(state.pid, grace_s=0)
        _reap(state.pid)
        return f"process {state.pid} had already exited" + (left and f"; {left}")
    done = stop_group(state.pid, grace_s=grace_s)
    _reap(state.pid)
    return done


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Engines this process started (by leader pid), reaped when stopped: a program that starts
and stops engines in one process (`servekit tune`) leaves no zombie and no Popen still
'running' behind."""


def adopt(process: subprocess.Popen[bytes]) -> None:
    """Remember an engine leader this process started, for `stop` to reap."""
    _CHILDREN[process.pid] = process


def _reap(pid: int) -> None:
    process = _CHILDREN.pop(pid, None)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def stop_group(pgid: int, *, grace_s: float) -> str:
    """SIGTERM a process group, SIGKILL what is left after `grace_s`; "" if it was empty.

    Only call this for a group that is ours (see the module docstring).

    Raises:
        LaunchError: members survive SIGKILL.
    """
    if not group_alive(pgid):
        return ""
    _signal_group(pgid, signal.SIGTERM)
    if _wait_group(pgid, grace_s):
        return f"stopped process group {pgid}"
    _signal_group(pgid, signal.SIGKILL)
    if not _wait_group(pgid, 10.0):
        raise LaunchError(f"process group {pgid} survived SIGKILL",
                          fix=f"inspect it: ps -g {pgid}")  # fmt: skip
    return f"killed process group {pgid} (SIGKILL after {grace_s:g} s)"


def _wait_group(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _stop_container(state: EngineState, grace_s: float) -> str:
    """Stop and remove the container with exactly the recorded id (never one found by
    name: a container of the same name that `up` did not start is someone else's)."""
    ident = state.container_id
    if not ident:
        raise ConfigError("the state file has no container id",
                          fix=f"stop the container {state.container} by hand")  # fmt: skip
    if container_id_of(ident) != ident:
        return f"container {state.container} was already gone"
    stopped = docker(["stop", "-t", str(int(grace_s)), ident], what="docker stop", check=False,
                     timeout_s=grace_s + DOCKER_TIMEOUT_S)  # fmt: skip
    if stopped.returncode != 0 and not is_gone(stopped):
        raise LaunchError(f"docker stop {state.container} failed: {last_line(stopped)}",
                          fix="check the docker daemon; the state is kept")  # fmt: skip
    removed = docker(["rm", "-f", ident], what="docker rm", check=False)
    if removed.returncode != 0 and not is_gone(removed):
        raise LaunchError(f"docker rm {state.container} failed: {last_line(removed)}",
                          fix="check the docker daemon; the state is kept")  # fmt: skip
    if is_gone(stopped):
        return f"container {state.container} was already gone"
    return f"stopped and removed container {state.container} ({ident[:12]})"
