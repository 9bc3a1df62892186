"""wait_until_ready with an injected clock: timeouts, and a dead engine behind a live port."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from servekit.runtime.follow import wait_until_ready
from servekit.runtime.state import EngineState


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def healthy_url() -> Iterator[str]:
    """Another server answering /health 200 on loopback."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _state(tmp_path: Path, pid: int, created: float | None, url: str) -> EngineState:
    log = tmp_path / "engine.log"
    log.write_text("INFO Starting to load model /m...\n")
    return EngineState(profile="p", runtime="process", url=url, started_at=0.0,
                       log_path=str(log), argv=["x"], pid=pid, pid_started_at=created)  # fmt: skip


def test_timeout_reports_the_stage_reached(tmp_path: Path) -> None:
    """A live engine that never answers: not ready after the timeout, at its last stage."""
    me = os.getpid()
    state = _state(tmp_path, me, psutil.Process(me).create_time(), "http://127.0.0.1:9")
    ticks = iter(range(0, 1000, 10))
    stages: list[str] = []
    outcome = wait_until_ready(state, timeout_s=25, on_stage=lambda s, _: stages.append(s),
                               clock=lambda: float(next(ticks)), sleep=lambda _: None)  # fmt: skip
    assert not outcome.ready
    assert outcome.reason == "not ready after 25 s"
    assert outcome.stage == "weights"
    assert stages == ["weights"]


def test_a_dead_engine_is_not_ready_even_if_its_port_answers(
    tmp_path: Path, healthy_url: str
) -> None:
    """Liveness comes before /health: another server on the port cannot make it ready."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    created = psutil.Process(done.pid).create_time()
    done.wait()
    state = _state(tmp_path, done.pid, created, healthy_url)
    outcome = wait_until_ready(state, timeout_s=60, on_stage=lambda *_: None,
                               sleep=lambda _: None)  # fmt: skip
    assert not outcome.ready
    assert "has exited" in outcome.reason


def test_a_live_engine_with_health_200_is_ready(tmp_path: Path, healthy_url: str) -> None:
    """The engine runs and /health is 200: ready, with the stages its log reached."""
    me = os.getpid()
    state = _state(tmp_path, me, psutil.Process(me).create_time(), healthy_url)
    stages: list[str] = []
    outcome = wait_until_ready(state, timeout_s=60, on_stage=lambda s, _: stages.append(s))
    assert outcome.ready
    assert stages == ["weights", "ready"]
