"""`servekit up --runtime docker` with a fake `docker` on PATH that records its arguments.

No Docker engine runs here. The fake plays a container (run, inspect, logs, stop, rm);
readiness is a real `/health` from the built-in simulator on the profile's port.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sandbox import LaunchEnv

from servekit.runtime.state import read_state

pytestmark = pytest.mark.integration

TESTS = Path(__file__).parents[1]
CONTAINER_ID = "3f2a9c1e5b7d" + "0" * 52


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _calls(env: LaunchEnv) -> list[list[str]]:
    path = Path(env.env["FAKE_DOCKER_CALLS"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _up(env: LaunchEnv, name: str, *extra: str) -> Any:
    return env.servekit("up", name, "--runtime", "docker",
                        "--profiles-dir", str(env.profiles_dir), *extra)  # fmt: skip


def test_docker_up_no_wait_status_down(launch_env: LaunchEnv) -> None:
    """up runs `docker run -d` with the rendered options and records the id; status asks
    docker and /health; down stops and removes exactly that container."""
    name = launch_env.profile("dockered", _free_port(), block_size=16)
    launch_env.env["FAKE_DOCKER_LOG"] = str(TESTS / "plan" / "data" / "m3_a800_tp8.log")
    up = _up(launch_env, name, "--no-wait")
    assert up.returncode == 0, up.stderr
    by_name, inspect, run = _calls(launch_env)[:3]
    assert by_name == ["inspect", "--type", "container", "-f", "{{.Id}}", "dockered"]
    assert inspect == ["image", "inspect", "vllm/vllm-openai:v0.32.0"]
    assert run[:2] == ["run", "-d"]
    assert run[run.index("--name") + 1] == "dockered"
    assert run[run.index("--gpus") + 1] == "1"
    assert run[run.index("-p") + 1].startswith("127.0.0.1:")
    assert "vllm/vllm-openai:v0.32.0" in run
    assert run[run.index("--block-size") + 1] == "16"
    state = read_state(launch_env.state_dir, name)
    assert state is not None
    assert state.container_id == CONTAINER_ID
    assert state.container == "dockered"

    status = launch_env.servekit("status", name, "--json")
    assert status.returncode == 3  # running, but nothing answers /health
    document = json.loads(status.stdout)
    assert document["running"] is True
    assert document["health"] is None
    assert ["inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", CONTAINER_ID] in _calls(
        launch_env
    )

    logs = launch_env.servekit("logs", name, "--tail", "5")
    assert logs.returncode == 0
    assert ["logs", "--tail", "5", CONTAINER_ID] in _calls(launch_env)

    down = launch_env.servekit("down", name, "--grace", "7")
    assert down.returncode == 0, down.stderr
    assert "stopped and removed container dockered" in down.stdout
    calls = _calls(launch_env)
    assert ["stop", "-t", "7", CONTAINER_ID] in calls
    assert ["rm", "-f", CONTAINER_ID] in calls
    assert read_state(launch_env.state_dir, name) is None


def test_docker_up_waits_with_stages_until_health(launch_env: LaunchEnv) -> None:
    """--wait follows `docker logs -f` through every stage and ends at a real /health 200,
    served by the simulator, started only once the container's log was printed."""
    port = _free_port()
    name = launch_env.profile("dockered", port)
    launch_env.env["FAKE_DOCKER_LOG"] = str(TESTS / "plan" / "data" / "m3_a800_tp8.log")
    up = subprocess.Popen(
        [sys.executable, "-m", "servekit", "up", name, "--runtime", "docker", "--profiles-dir",
         str(launch_env.profiles_dir), "--timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=launch_env.env,
    )  # fmt: skip
    marker = Path(launch_env.env["FAKE_DOCKER_CALLS"]).with_suffix(".logged")
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert up.poll() is None, up.communicate()
        assert time.monotonic() < deadline, "docker logs never ran"
        time.sleep(0.05)
    server = subprocess.Popen(
        [sys.executable, "-m", "servekit", "sim", "serve", "--profile", "minimax-m3-mxfp8-8xa800",
         "--port", str(port), "--time-scale", "0.02"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        out, err = up.communicate(timeout=90)
        assert up.returncode == 0, out + err
        for label in ("loading weights", "profiling memory", "sizing the KV cache",
                      "capturing CUDA graphs", "API server up"):  # fmt: skip
            assert label in out
        assert out.index("loading weights") < out.index("capturing CUDA graphs")
        assert "KV capacity: 241,664 tokens, max concurrency 1.84x at 131,072 tokens" in out
        assert "serving MiniMax-M3-MXFP8" in out
        assert ["logs", "-f", CONTAINER_ID] in _calls(launch_env)
    finally:
        server.terminate()
        server.wait(timeout=30)
        launch_env.servekit("down", name)


def test_container_that_exits_during_startup_fails_with_its_known_issue(
    launch_env: LaunchEnv,
) -> None:
    """The container exits with code 1 after printing the M3 crash: up names the known
    issue and leaves the container for down (docker keeps exited containers)."""
    name = launch_env.profile("crashing", _free_port())
    launch_env.env["FAKE_DOCKER_LOG"] = str(
        TESTS / "doctor" / "data" / "m3_v0251_illegal_memory_access.log"
    )
    launch_env.env["FAKE_DOCKER_EXIT_AFTER_LOGS"] = "1"
    up = _up(launch_env, name, "--timeout", "30")
    assert up.returncode == 1
    assert "container crashing has exited (exit code 1)" in up.stderr
    assert "; its log ends with: " in up.stderr  # the crash's last error line, quoted
    assert len(up.stderr.strip().splitlines()) == 1
    assert "known issue m3-topk-layout-triton" in up.stdout
    assert read_state(launch_env.state_dir, name) is not None
    down = launch_env.servekit("down", name)
    assert down.returncode == 0
    assert ["rm", "-f", CONTAINER_ID] in _calls(launch_env)


def test_docker_run_failure_is_reported(launch_env: LaunchEnv, tmp_path: Path) -> None:
    """docker refusing to run is one clear error with docker's message; no state is kept."""
    failing = tmp_path / "bin" / "docker"
    failing.write_text("#!/bin/sh\n[ \"$1\" = image ] && exit 0\n"
                       "[ \"$1\" = inspect ] && echo 'Error: No such object: nogpu' >&2 && exit 1\n"
                       "echo 'docker: Error response from daemon: "
                       "could not select device driver \"\" with capabilities: [[gpu]].' >&2\n"
                       "exit 125\n")  # fmt: skip
    name = launch_env.profile("nogpu", _free_port())
    up = _up(launch_env, name)
    assert up.returncode == 1
    assert "docker run failed: docker: Error response from daemon" in up.stderr
    assert read_state(launch_env.state_dir, name) is None


def test_env_values_never_reach_argv_state_or_output(launch_env: LaunchEnv) -> None:
    """A token in the profile's env is handed to docker through its environment: the
    command line, the state file and the output carry only its name."""
    name = launch_env.profile("secretive", _free_port())
    path = launch_env.profiles_dir / f"{name}.yaml"
    path.write_text(path.read_text().replace("env:\n", "env:\n  HF_TOKEN: hf_supersecret\n"))
    launch_env.env["FAKE_DOCKER_LOG"] = str(TESTS / "plan" / "data" / "m3_a800_tp8.log")
    up = _up(launch_env, name, "--no-wait", "--json")
    try:
        assert up.returncode == 0, up.stderr
        run = _calls(launch_env)[-1]
        assert run[run.index("HF_TOKEN") - 1] == "-e"
        assert "hf_supersecret" not in json.dumps(_calls(launch_env))
        assert "hf_supersecret" not in up.stdout + up.stderr
        assert "hf_supersecret" not in (launch_env.state_dir / f"{name}.json").read_text()
        seen = Path(launch_env.env["FAKE_DOCKER_CALLS"]).with_suffix(".run-env").read_text()
        assert seen == "hf_supersecret"
        assert (launch_env.state_dir.stat().st_mode & 0o777) == 0o700
    finally:
        launch_env.servekit("down", name)


def test_a_missing_image_is_pulled_before_run(launch_env: LaunchEnv) -> None:
    """`docker run` is bounded in time, so a missing image is pulled first, unbounded."""
    name = launch_env.profile("pulling", _free_port())
    launch_env.env["FAKE_DOCKER_NO_IMAGE"] = "1"
    up = _up(launch_env, name, "--no-wait")
    try:
        assert up.returncode == 0, up.stderr
        commands = [call[:2] for call in _calls(launch_env)]
        assert commands[1:4] == [["image", "inspect"], ["pull", "vllm/vllm-openai:v0.32.0"],
                                 ["run", "-d"]]  # fmt: skip
        assert "pulling vllm/vllm-openai:v0.32.0" in up.stderr
    finally:
        launch_env.servekit("down", name)


def test_down_keeps_the_state_when_docker_cannot_stop_the_container(
    launch_env: LaunchEnv,
) -> None:
    """An unreachable daemon is an error, not "already gone": the state stays for a retry."""
    name = launch_env.profile("stuck", _free_port())
    assert _up(launch_env, name, "--no-wait").returncode == 0
    launch_env.env["FAKE_DOCKER_BROKEN"] = "1"
    down = launch_env.servekit("down", name)
    assert down.returncode == 1
    assert "Cannot connect to the Docker daemon" in down.stderr
    assert read_state(launch_env.state_dir, name) is not None
    launch_env.env["FAKE_DOCKER_BROKEN"] = "0"
    assert launch_env.servekit("down", name).returncode == 0
    assert read_state(launch_env.state_dir, name) is None


def test_a_stale_container_is_removed_before_the_next_start(launch_env: LaunchEnv) -> None:
    """An exited container from an earlier up is removed (freeing its name) and replaced."""
    name = launch_env.profile("again", _free_port())
    assert _up(launch_env, name, "--no-wait").returncode == 0
    Path(launch_env.env["FAKE_DOCKER_CALLS"]).with_suffix(".state").write_text("false 1")
    again = _up(launch_env, name, "--no-wait")
    try:
        assert again.returncode == 0, again.stderr
        calls = _calls(launch_env)
        assert calls.index(["rm", "-f", CONTAINER_ID]) < len(calls) - 1
        assert calls[-1][:2] == ["run", "-d"]
    finally:
        launch_env.servekit("down", name)
