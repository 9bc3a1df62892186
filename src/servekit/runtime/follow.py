"""Following an engine's log (shell): readiness with stages, and `servekit logs`.

Both runtimes are followed through a log file: the process runtime writes it directly,
and for docker `up` copies `docker logs -f` into it while it waits.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servekit.errors import LaunchError
from servekit.runtime.control import health, liveness
from servekit.runtime.docker_cli import container_id_of, docker_cli, docker_passthrough
from servekit.runtime.stages import StageTracker
from servekit.runtime.state import EngineState

POLL_S = 0.5
"""How often the log, the engine and /health are looked at while waiting."""

READY_LOG_S = 3.0
"""How long, once /health answers, the container's copied log may take to show the
server's start (its KV cache lines come just before)."""

FOLLOWER_DRAIN_S = 5.0
"""How long `docker logs -f` may take to deliver an exited container's last lines."""


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
        return [_text(line) for line in lines]

    def rest(self) -> list[str]:
        """A last line the writer did not end with a newline, once it is done writing."""
        partial, self._partial = self._partial, b""
        return [_text(partial)] if partial else []


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="replace").rstrip("\r")


@dataclass(frozen=True, slots=True)
class StartupOutcome:
    """How waiting ended: ready, the engine exited, or the time ran out.

    Attributes:
        ready: /health answered 200.
        stage: the last stage reached.
        elapsed_s: seconds waited.
        reason: why it is not ready, for people.
        exited: the engine exited (rather than the time running out).
    """

    ready: bool
    stage: str
    elapsed_s: float
    reason: str = ""
    exited: bool = False


def wait_until_ready(
    state: EngineState,
    *,
    timeout_s: float,
    on_stage: Callable[[str, float], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StartupOutcome:
    """Follow the log and poll until /health is 200, the engine exits, or `timeout_s` passes.

    The engine's liveness is checked before /health, so another server answering on the
    same port never makes a dead engine look ready.

    Args:
        state: what `up` started.
        timeout_s: how long loading may take.
        on_stage: called with each stage reached and the seconds since waiting began.
    """
    follower = _follow_container_logs(state) if state.runtime == "docker" else None
    tracker = StageTracker()
    tail = LogTail(Path(state.log_path))
    start = clock()

    def feed(lines: list[str], elapsed: float) -> None:
        for line in lines:
            for stage in tracker.feed(line):
                on_stage(stage, elapsed)

    try:
        while True:
            elapsed = clock() - start
            feed(tail.read_lines(), elapsed)
            alive = liveness(state)
            if not alive.running:
                _drain(follower)
                feed(tail.read_lines() + tail.rest(), elapsed)
                code = "" if alive.exit_code is None else f" (exit code {alive.exit_code})"
                return StartupOutcome(False, tracker.stage, elapsed, f"{alive.detail}{code}",
                                      exited=True)  # fmt: skip
            if health(state.url) == 200:
                feed(tail.read_lines(), elapsed)  # stages logged since the last read
                if follower is not None:  # `docker logs -f` delivers a moment later
                    _catch_up(tail, tracker, feed, elapsed, clock, sleep)
                if tracker.mark_ready():
                    on_stage("ready", elapsed)
                return StartupOutcome(True, "ready", elapsed)
            if elapsed > timeout_s:
                return StartupOutcome(False, tracker.stage, elapsed,
                                      f"not ready after {timeout_s:.0f} s")  # fmt: skip
            sleep(POLL_S)
    finally:
        _stop_follower(follower)


def _catch_up(
    tail: LogTail, tracker: StageTracker, feed: Callable[[list[str], float], None],
    elapsed: float, clock: Callable[[], float], sleep: Callable[[float], None],
) -> None:  # fmt: skip
    """Read the copied log until it shows the API server's start, for at most
    READY_LOG_S: /health can answer before `docker logs -f` has copied the last startup
    lines (the KV cache figures among them)."""
    deadline = clock() + READY_LOG_S
    while tracker.stage != "ready" and clock() < deadline:
        sleep(0.1)
        feed(tail.read_lines(), elapsed)


def _follow_container_logs(state: EngineState) -> subprocess.Popen[bytes]:
    with Path(state.log_path).open("wb") as sink:
        return subprocess.Popen(
            [docker_cli(), "logs", "-f", state.container_id or ""],
            stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def _drain(follower: subprocess.Popen[bytes] | None) -> None:
    """Let `docker logs -f` of an exited container deliver its last lines and end."""
    if follower is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            follower.wait(timeout=FOLLOWER_DRAIN_S)


def _stop_follower(follower: subprocess.Popen[bytes] | None) -> None:
    if follower is None or follower.poll() is not None:
        return
    follower.terminate()
    try:
        follower.wait(timeout=5)
    except subprocess.TimeoutExpired:
        follower.kill()
        follower.wait()


def show_log(
    state: EngineState, *, tail: int | None, follow: bool, echo: Callable[[str], None]
) -> int:
    """Print an engine's log (the last `tail` lines), then new lines while `follow`ing.

    Following ends when the engine stops or on Ctrl-C. Docker engines are shown with
    `docker logs`, once docker confirmed the recorded container still exists. Returns
    the exit code for the command.

    Raises:
        LaunchError: the docker daemon cannot be reached, or the container is gone.
    """
    if state.runtime == "docker":
        if container_id_of(state.container_id or "") is None:
            raise LaunchError(
                f"container {state.container} is gone; docker has no log of it",
                fix=f"read the copy servekit up kept, {state.log_path}; servekit down "
                f"{state.profile} forgets it",
            )
        args = ["logs", *(["--follow"] if follow else [])]
        args += ["--tail", str(tail)] if tail is not None else []
        return docker_passthrough([*args, state.container_id or ""])
    reader = LogTail(Path(state.log_path))
    lines = reader.read_lines()
    if not follow:
        lines += reader.rest()
    for line in lines if tail is None else lines[len(lines) - min(tail, len(lines)) :]:
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
    for line in reader.rest():
        echo(line)
    return 0
