"""Only what `up` started is touched: containers are acted on by exactly the recorded id."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from sandbox import LaunchEnv

from servekit.profiles import load_profile
from servekit.runtime.docker_cli import last_line
from servekit.runtime.launch import forget_stale
from servekit.runtime.state import EngineState, read_state, write_state

OTHER_ID = "9" * 64  # a container id docker does not know; the fake knows another one


def _calls(env: LaunchEnv) -> list[list[str]]:
    path = Path(env.env["FAKE_DOCKER_CALLS"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _stale_state(env: LaunchEnv, name: str, container_id: str | None) -> EngineState:
    state = EngineState(
        profile=name, runtime="docker", url="http://127.0.0.1:1", started_at=time.time(),
        log_path=str(env.state_dir / f"{name}.log"), argv=["docker", "run"],
        container=name, container_id=container_id,
    )  # fmt: skip
    write_state(env.state_dir, state)
    return state


def test_forget_stale_never_removes_a_container_with_another_id(
    launch_env: LaunchEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale state whose id docker resolves to a different container (an id prefix or
    a name clash) removes nothing and forgets the state."""
    for key, value in launch_env.env.items():
        monkeypatch.setenv(key, value)
    name = launch_env.profile("stale", 1)
    profile = load_profile(name, extra_dirs=(str(launch_env.profiles_dir),))
    Path(launch_env.env["FAKE_DOCKER_CALLS"]).with_suffix(".state").write_text("false 1")
    _stale_state(launch_env, name, OTHER_ID)
    forget_stale(launch_env.state_dir, profile)
    assert not [call for call in _calls(launch_env) if call[0] == "rm"]
    assert read_state(launch_env.state_dir, name) is None


def test_down_without_a_recorded_id_refuses_rather_than_stop_by_name(
    launch_env: LaunchEnv,
) -> None:
    """A state file without a container id is an error; docker is never asked to stop or
    remove the name (another container may have it)."""
    _stale_state(launch_env, "nameonly", None)
    down = launch_env.servekit("down", "nameonly")
    assert down.returncode == 1
    assert "the state file has no container id" in down.stderr
    assert not [call for call in _calls(launch_env) if call[0] in ("stop", "rm")]


def test_docker_errors_quote_the_error_not_the_help_hint() -> None:
    """docker's closing `Run 'docker run --help'` line is skipped in error messages."""
    result = subprocess.CompletedProcess(
        ["docker", "run"], 125, "",
        "docker: Error response from daemon: Conflict.\n\n"
        "Run 'docker run --help' for more information\n",
    )  # fmt: skip
    assert last_line(result) == "docker: Error response from daemon: Conflict."
    assert last_line(subprocess.CompletedProcess([], 3, "", "")) == "exit code 3"


def test_secret_env_must_be_set_before_anything_starts(launch_env: LaunchEnv) -> None:
    """up refuses, naming the variable, when a secret_env variable is unset; nothing runs."""
    name = launch_env.profile("needs-token", 1)
    path = launch_env.profiles_dir / f"{name}.yaml"
    path.write_text(path.read_text() + "secret_env: [SERVEKIT_UNSET_TOKEN]\n")
    launch_env.env.pop("SERVEKIT_UNSET_TOKEN", None)
    for runtime in ("docker", "process"):
        up = launch_env.servekit("up", name, "--runtime", runtime,
                                 "--profiles-dir", str(launch_env.profiles_dir))  # fmt: skip
        assert up.returncode == 1
        assert "needs the secret SERVEKIT_UNSET_TOKEN" in up.stderr
        assert len(up.stderr.strip().splitlines()) == 1
    assert _calls(launch_env) == []
