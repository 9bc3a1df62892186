"""The engine watchdog: it stops exactly the recorded engine when its owner dies, and goes
away by itself when the owner stops the engine first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servekit.runtime.state import (
    EngineState,
    group_alive,
    process_identity,
    read_state,
    remove_state,
    write_state,
)

pytestmark = pytest.mark.integration


def _engine(directory: Path, name: str) -> tuple[subprocess.Popen[bytes], EngineState]:
    """A stand-in engine: a process group of two sleeping processes, recorded as `up` does."""
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], start_new_session=True)
    created, _ = process_identity(proc.pid)
    state = EngineState(profile=name, runtime="process", url="http://127.0.0.1:9",
                        started_at=time.time(), log_path=str(directory / f"{name}.log"),
                        argv=["sh"], pid=proc.pid, pid_started_at=created)  # fmt: skip
    write_state(directory, state)
    return proc, state


def _watchdog(
    owner: subprocess.Popen[bytes], directory: Path, name: str
) -> subprocess.Popen[bytes]:
    created, _ = process_identity(owner.pid)
    return subprocess.Popen(
        [sys.executable, "-m", "servekit.runtime.watchdog", "--owner", str(owner.pid),
         "--owner-created", repr(created), "--state-dir", str(directory), "--profile", name,
         "--interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def _end(owner: subprocess.Popen[bytes], watchdog: subprocess.Popen[bytes],
         engine: subprocess.Popen[bytes]) -> None:  # fmt: skip
    for proc in (owner, watchdog):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    if group_alive(engine.pid):
        os.killpg(engine.pid, signal.SIGKILL)
    engine.wait()


def _until(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_owner_killed_the_engine_group_is_stopped_and_forgotten(tmp_path: Path) -> None:
    """SIGKILL to the owner: the watchdog stops every process of the engine's group and
    removes its state, then exits."""
    engine, _ = _engine(tmp_path, "eng")
    owner = subprocess.Popen(["sleep", "300"])
    watchdog = _watchdog(owner, tmp_path, "eng")
    try:
        assert _until(lambda: len(group_alive(engine.pid)) >= 2, 5)
        time.sleep(0.3)
        assert group_alive(engine.pid)  # the owner lives: nothing is touched
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert watchdog.wait(timeout=30) == 0
        assert group_alive(engine.pid) == []
        assert read_state(tmp_path, "eng") is None
        said, _ = watchdog.communicate()
        assert b"the owner died" in said
    finally:
        _end(owner, watchdog, engine)


def test_owner_stops_the_engine_itself_and_the_watchdog_leaves(tmp_path: Path) -> None:
    """When the owner forgets the state (it stopped the engine), the watchdog exits and
    signals nothing; a process that only took the owner's pid later is never its owner."""
    engine, _ = _engine(tmp_path, "eng")
    owner = subprocess.Popen(["sleep", "300"])
    watchdog = _watchdog(owner, tmp_path, "eng")
    try:
        remove_state(tmp_path, "eng")
        assert watchdog.wait(timeout=10) == 0
        assert len(group_alive(engine.pid)) >= 2  # not the watchdog's to stop any more
    finally:
        _end(owner, watchdog, engine)
