"""`servekit up/status/logs/down` with the process runtime, against a fake `vllm` on PATH.

The fake replays a real vLLM CPU startup log, forks an "engine core" child into its
process group and serves /health on loopback, so readiness, stage display, the state
file and stopping the whole group are all exercised for real; the real engine is in
tests/engine/test_engine_launch.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox import LaunchEnv, group_members

from servekit.runtime.state import read_state

pytestmark = pytest.mark.integration


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _up(env: LaunchEnv, name: str, *extra: str) -> object:
    return env.servekit("up", name, "--profiles-dir", str(env.profiles_dir),
                        "--launcher", "vllm", *extra)  # fmt: skip


def test_up_status_logs_down_leave_nothing_behind(launch_env: LaunchEnv) -> None:
    """up follows the stages to ready and prints capacity; status is healthy; logs shows
    the log; down stops the whole process group and forgets the state."""
    name = launch_env.profile("fake-engine", _free_port(), block_size=16)
    up = launch_env.servekit("up", name, "--profiles-dir", str(launch_env.profiles_dir),
                             "--launcher", "vllm")  # fmt: skip
    state = read_state(launch_env.state_dir, name)
    assert state is not None
    assert state.pid is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        out = up.stdout
        assert out.index("loading weights") < out.index("profiling memory")
        assert out.index("profiling memory") < out.index("sizing the KV cache")
        assert out.index("sizing the KV cache") < out.index("API server up")
        assert "ready in" in out
        assert "serving fake-model" in out
        assert "KV capacity: 262,144 tokens, max concurrency 128.00x at 2,048 tokens" in out
        argv = json.loads((launch_env.root / "vllm-argv.json").read_text())
        assert argv[:2] == ["serve", str(launch_env.root / "model")]
        assert argv[argv.index("--block-size") + 1] == "16"
        assert state.argv[0] == "vllm"
        assert state.env_names == ["FAKE_VLLM_ARGV"]
        assert len(group_members(state.pid)) >= 2  # the server and its "engine core"

        status = launch_env.servekit("status", name, "--json")
        assert status.returncode == 0, status.stderr
        document = json.loads(status.stdout)
        assert document["running"] is True
        assert document["health"] == 200
        assert document["served_model"] == "fake-model"
        assert document["max_model_len"] == 2048
        assert document["uptime_s"] >= 0

        logs = launch_env.servekit("logs", name, "--tail", "2")
        assert logs.returncode == 0
        assert logs.stdout.strip().endswith("Application startup complete.")
        assert len(logs.stdout.strip().splitlines()) == 2
        full = launch_env.servekit("logs", "show", name)
        assert "Loading weights took" in full.stdout
    finally:
        down = launch_env.servekit("down", name)
    assert down.returncode == 0, down.stderr
    assert f"stopped process group {state.pid}" in down.stdout
    assert group_members(state.pid) == []
    assert read_state(launch_env.state_dir, name) is None
    after = launch_env.servekit("status", name)
    assert after.returncode == 1
    assert "no engine started by servekit up" in after.stderr


def test_up_refuses_a_second_start_and_down_escalates_to_sigkill(launch_env: LaunchEnv) -> None:
    """A running engine is not started twice; one that ignores SIGTERM is killed after the
    grace period."""
    name = launch_env.profile("stubborn", _free_port())
    launch_env.env["FAKE_VLLM_MODE"] = "stubborn"
    first = _up(launch_env, name)
    state = read_state(launch_env.state_dir, name)
    assert state is not None
    assert state.pid is not None
    try:
        assert first.returncode == 0, first.stderr  # type: ignore[attr-defined]
        again = _up(launch_env, name)
        assert again.returncode == 1  # type: ignore[attr-defined]
        assert "already running" in again.stderr  # type: ignore[attr-defined]
    finally:
        down = launch_env.servekit("down", name, "--grace", "1")
    assert down.returncode == 0, down.stderr
    assert "SIGKILL" in down.stdout
    assert group_members(state.pid) == []


def test_engine_that_crashes_during_startup_is_reported_with_its_known_issue(
    launch_env: LaunchEnv,
) -> None:
    """The engine exits: up fails with the exit, the stage, the log's failures and the
    matching known issue; nothing is left to stop."""
    name = launch_env.profile("crasher", _free_port())
    launch_env.env["FAKE_VLLM_MODE"] = "crash"
    up = _up(launch_env, name)
    assert up.returncode == 1  # type: ignore[attr-defined]
    assert "did not become ready: process" in up.stderr  # type: ignore[attr-defined]
    assert "known issue m3-topk-layout-triton" in up.stdout  # type: ignore[attr-defined]
    assert read_state(launch_env.state_dir, name) is None
    pgid = int(re.search(r"process group (\d+)", up.stdout).group(1))  # type: ignore[union-attr, attr-defined]
    assert group_members(pgid) == []  # the "engine core" the crashed leader left is stopped


def test_no_wait_returns_at_once_and_a_stale_state_is_replaced(launch_env: LaunchEnv) -> None:
    """--no-wait records the start and returns; status then reports; a state whose process
    is gone does not block the next up."""
    name = launch_env.profile("nowait", _free_port())
    up = _up(launch_env, name, "--no-wait", "--json")
    assert up.returncode == 0  # type: ignore[attr-defined]
    document = json.loads(up.stdout)  # type: ignore[attr-defined]
    assert "ready" not in document  # --no-wait: started, not followed
    started = document["engine"]
    assert started["runtime"] == "process"
    assert started["pid"] > 0
    try:
        deadline = time.monotonic() + 30
        while launch_env.servekit("status", name).returncode != 0:
            assert time.monotonic() < deadline, "never became healthy"
            time.sleep(0.5)
    finally:
        assert launch_env.servekit("down", name).returncode == 0
    stale = started | {"pid": 2**22 - 1, "pid_started_at": 1.0}
    launch_env.state_dir.joinpath(f"{name}.json").write_text(json.dumps(stale))
    status = launch_env.servekit("status", name)
    assert status.returncode == 3
    assert "not healthy" in status.stdout
    again = _up(launch_env, name)
    try:
        assert again.returncode == 0, again.stderr  # type: ignore[attr-defined]
    finally:
        launch_env.servekit("down", name)


def test_state_file_holds_no_environment_values(launch_env: LaunchEnv) -> None:
    """Env values (tokens, keys) never reach the state file: names only."""
    name = launch_env.profile("secret", _free_port())
    path = launch_env.profiles_dir / f"{name}.yaml"
    path.write_text(path.read_text().replace("env:\n", "env:\n  HF_TOKEN: hf_supersecret\n"))
    up = _up(launch_env, name, "--no-wait")
    try:
        assert up.returncode == 0  # type: ignore[attr-defined]
        text = (launch_env.state_dir / f"{name}.json").read_text()
        assert "hf_supersecret" not in text
        assert "HF_TOKEN" in text
    finally:
        launch_env.servekit("down", name)


def test_a_secret_env_value_reaches_the_engine_and_no_file(launch_env: LaunchEnv) -> None:
    """secret_env: the engine process gets the value from up's environment; the state
    file and the command line name it at most, never hold its value."""
    name = launch_env.profile("secret-env", _free_port())
    path = launch_env.profiles_dir / f"{name}.yaml"
    path.write_text(path.read_text() + "secret_env: [SERVEKIT_TEST_SECRET]\n")
    secret = "sk-process-" + "7f3a9c" * 2  # a made-up value the test looks for
    launch_env.env["SERVEKIT_TEST_SECRET"] = secret
    up = _up(launch_env, name)
    try:
        assert up.returncode == 0, up.stdout + up.stderr  # type: ignore[attr-defined]
        seen = (launch_env.root / "vllm-argv.json.secret").read_text()
        assert seen == secret
        state = (launch_env.state_dir / f"{name}.json").read_text()
        assert "SERVEKIT_TEST_SECRET" in state
        for text in (state, up.stdout, up.stderr):  # type: ignore[attr-defined]
            assert secret not in text
    finally:
        launch_env.servekit("down", name)


def test_down_never_signals_a_pid_that_belongs_to_another_process(launch_env: LaunchEnv) -> None:
    """A state whose pid is now another process's (creation time differs): down signals
    nothing and that process keeps running."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)  # fmt: skip
    try:
        name = launch_env.profile("recycled", _free_port())
        state = {
            "profile": name, "runtime": "process", "url": "http://127.0.0.1:9", "argv": ["x"],
            "started_at": 0.0, "log_path": str(launch_env.root / "x.log"),
            "pid": other.pid, "pid_started_at": 1.0,
        }  # fmt: skip
        launch_env.state_dir.mkdir()
        (launch_env.state_dir / f"{name}.json").write_text(json.dumps(state))
        down = launch_env.servekit("down", name)
        assert down.returncode == 0, down.stderr
        assert "nothing signalled" in down.stdout
        assert other.poll() is None
        assert group_members(other.pid) == [other.pid]
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait()


def test_malformed_and_unreadable_state_files_are_clear_errors(launch_env: LaunchEnv) -> None:
    """A state file that is not servekit's, or not text, is one error naming it."""
    launch_env.state_dir.mkdir()
    path = launch_env.state_dir / "broken.json"
    for content in (b'{"profile": "broken"}', b"\xff\xfe\x00garbage"):
        path.write_bytes(content)
        for command in ("status", "down", "logs"):
            done = launch_env.servekit(command, "broken")
            assert done.returncode == 1, (command, done.stderr)
            assert str(path) in done.stderr
            assert "Traceback" not in done.stderr


def test_logs_tail_longer_than_the_log_and_an_unterminated_last_line(
    launch_env: LaunchEnv,
) -> None:
    """`-n` beyond the log's length prints all of it, including a last line without a
    newline."""
    name = launch_env.profile("short", _free_port())
    log = launch_env.root / "short.log"
    log.write_text("one\ntwo\nthree")
    state = {"profile": name, "runtime": "process", "url": "http://127.0.0.1:9", "argv": ["x"],
             "started_at": 0.0, "log_path": str(log), "pid": None}  # fmt: skip
    launch_env.state_dir.mkdir()
    (launch_env.state_dir / f"{name}.json").write_text(json.dumps(state))
    done = launch_env.servekit("logs", name, "-n", "5")
    assert done.stdout.splitlines() == ["one", "two", "three"]
    done = launch_env.servekit("logs", name, "-n", "2")
    assert done.stdout.splitlines() == ["two", "three"]
    done = launch_env.servekit("logs", name, "-f")  # the engine is not running: ends at once
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["one", "two", "three"]


def test_a_busy_port_and_a_multi_node_profile_are_refused(launch_env: LaunchEnv) -> None:
    """up does not start an engine whose port another server holds (it would look ready
    through that server), nor a profile that spans nodes."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        name = launch_env.profile("busy", listener.getsockname()[1])
        up = _up(launch_env, name)
        assert up.returncode == 1  # type: ignore[attr-defined]
        assert "already listens on 127.0.0.1" in up.stderr  # type: ignore[attr-defined]
    assert read_state(launch_env.state_dir, name) is None
    multi = launch_env.servekit("up", "minimax-m3-bf16-2x8xa800")
    assert multi.returncode == 1
    assert "spans 2 nodes" in multi.stderr


def test_process_argv_maps_model_and_draft_paths_to_the_host(tmp_path: Path) -> None:
    """The process runtime runs on the host: /models/... becomes deploy.host_model_dir/...,
    in --model and inside --speculative-config."""
    from servekit.profiles import load_profile
    from servekit.runtime.launch import process_argv

    profile = load_profile(
        "minimax-m3-mxfp8-8xa800", overrides=[f"deploy.host_model_dir={tmp_path}"]
    )
    argv = process_argv(profile, "vllm")
    assert argv[:3] == ["vllm", "serve", f"{tmp_path}/MiniMax-M3-MXFP8"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["model"] == f"{tmp_path}/MiniMax-M3-EAGLE3"
