"""SIGTERM handled like Ctrl-C while a bench or validate run sends load (shell).

`docker stop`, Kubernetes and `timeout` send SIGTERM. While the load is sent, the first
SIGTERM stops the run the way Ctrl-C does, so the run stops sending, keeps what finished
and writes its summary. While the summary is written a SIGTERM is only noted, so it is
never cut short; later SIGTERMs are noted too (SIGKILL still ends the process at once).

An event loop run through `StopSignals.run` is stopped by cancelling its main task, as
asyncio does for Ctrl-C, then `KeyboardInterrupt` is raised once the loop has closed. It is
never raised inside the loop: a signal handler runs between any two bytecodes of the main
thread, so it would land in whichever task was running, which asyncio then reports
("Task exception was never retrieved", with a traceback). That happened when SIGINT is
ignored (a background job), where asyncio installs no Ctrl-C handler of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class StopSignals:
    """Whether a SIGTERM arrived, and whether one now stops the run like Ctrl-C."""

    terminated: bool = False
    forward: bool = True
    stop_loop: Callable[[], None] | None = None  # set while `run` runs an event loop

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """`asyncio.run(main)`; a SIGTERM while it runs (and `forward` is on) cancels `main`
        and raises KeyboardInterrupt after the loop has closed, as Ctrl-C does."""
        started: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = []
        stopping = False

        def stop() -> None:  # in the signal handler, between two bytecodes of this thread
            nonlocal stopping
            stopping = True
            for loop, task in started:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to stop
                    loop.call_soon_threadsafe(task.cancel)

        async def guarded() -> T:
            task = asyncio.current_task()
            assert task is not None  # a coroutine run by asyncio.run is a task
            started.append((asyncio.get_running_loop(), task))
            if stopping:  # the SIGTERM came as the loop started
                main.close()
                raise asyncio.CancelledError
            return await main

        self.stop_loop = stop
        try:
            return asyncio.run(guarded())
        except asyncio.CancelledError:
            if stopping:
                raise KeyboardInterrupt from None
            raise
        finally:
            self.stop_loop = None


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[StopSignals]:
    """Turn the first SIGTERM into Ctrl-C while `forward` is on (main thread only): an
    event loop run by `StopSignals.run` is cancelled; outside one, the SIGINT handler in
    force runs (Python's raises KeyboardInterrupt), or KeyboardInterrupt is raised when
    SIGINT is ignored."""
    state = StopSignals()
    if threading.current_thread() is not threading.main_thread():
        yield state  # signal handlers can only be set from the main thread
        return

    def handle(_signum: int, frame: FrameType | None) -> None:
        first = not state.terminated
        state.terminated = True
        if not (first and state.forward):
            return
        if state.stop_loop is not None:
            state.stop_loop()
            return
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIGINT ignored (a background job): stop the same way Ctrl-C would
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)
