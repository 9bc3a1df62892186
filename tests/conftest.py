"""Shared fixtures: live simulators and test server scripts on free loopback ports, and the
golden-file comparison."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PROFILE = "minimax-m3-mxfp8-8xa800"
StartServer = Callable[..., tuple["subprocess.Popen[bytes]", str]]
UPDATE_GOLDEN = os.environ.get("SERVEKIT_UPDATE_GOLDEN") == "1"

# A suite started in the background by a shell without job control (`cmd &`) inherits SIGINT
# ignored, and so would every servekit it starts: the Ctrl-C tests' SIGINT would then do
# nothing. Python's own handler here means the children start with the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int) -> None:
    """Wait until something listens on 127.0.0.1:port (about 20 s at most)."""
    for _ in range(400):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listened on port {port}")


def wait_for_records(path: Path, count: int) -> None:
    """Wait (about 30 s at most) until a records file holds `count` lines."""
    for _ in range(600):
        if path.is_file() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {count} records")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server process; kill it if it has not ended within 5 s (a hung handler
    can hold a graceful shutdown)."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture
def records_waiter() -> Callable[[Path, int], None]:
    """The `wait_for_records` helper, for tests that drive a run in a subprocess."""
    return wait_for_records


@dataclass(frozen=True)
class ScriptServer:
    """A running test server script."""

    url: str
    pid: int


@contextlib.contextmanager
def _script_starter() -> Iterator[Callable[..., ScriptServer]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(script: str, *args: str) -> ScriptServer:
        port = free_port()
        proc = subprocess.Popen([sys.executable, script, str(port), *args])
        started.append(proc)
        wait_for_port(port)
        return ScriptServer(f"http://127.0.0.1:{port}", proc.pid)

    try:
        yield start
    finally:
        for proc in started:
            stop(proc)


@pytest.fixture
def start_script() -> Iterator[Callable[..., ScriptServer]]:
    """Run a test server script (`python SCRIPT PORT *args`) on a free port.
    Every script started is stopped at the end."""
    with _script_starter() as start:
        yield start


@pytest.fixture(scope="session")
def start_session_script() -> Iterator[Callable[..., ScriptServer]]:
    """`start_script` for servers shared by a whole session (stopped at its end)."""
    with _script_starter() as start:
        yield start


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """Start `servekit sim serve` (EAGLE3 profile, 50x real time) with extra flags; all
    servers started are stopped at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*extra: str) -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "servekit", "sim", "serve", "--profile", PROFILE,
             "--port", str(port), "--time-scale", "0.02", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        started.append(proc)
        wait_for_port(port)
        return proc, f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        stop(proc)


def check_golden(text: str, golden: Path) -> None:
    """Assert `text` equals the golden file byte for byte; with SERVEKIT_UPDATE_GOLDEN=1,
    write the file first (then review the diff by eye)."""
    if UPDATE_GOLDEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.is_file(), f"{golden.name} is missing; run with SERVEKIT_UPDATE_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8")


@pytest.fixture
def golden() -> Callable[[str, Path], None]:
    """The golden-file comparison (`check_golden`) for tests of rendered text."""
    return check_golden
