"""Fixtures for the hostile suite: one hostile server (tests/hostile/hostile_server.py) on a
free loopback port for the whole session."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # the tests import hostile_server's table of modes
    sys.path.insert(0, str(HERE))
SCRIPT = HERE / "hostile_server.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int) -> None:
    for _ in range(400):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the hostile server did not listen on port {port}")


@pytest.fixture(scope="session")
def hostile_url() -> Iterator[str]:
    """`http://127.0.0.1:PORT` of a running hostile server; append `/m/MODE` for a mode."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(port)])
    try:
        _wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
