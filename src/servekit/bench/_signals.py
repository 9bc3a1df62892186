"""SIGTERM handled like Ctrl-C while a bench run sends load (shell).

`docker stop`, Kubernetes and `timeout` send SIGTERM. While the load is sent, the first
SIGTERM does what Ctrl-C does (the SIGINT handler in force runs: asyncio's cancels the run,
Python's default raises KeyboardInterrupt), so the run stops sending, keeps what finished
and writes its summary. While the summary is written a SIGTERM is only noted, so it is
never cut short; later SIGTERMs are noted too (SIGKILL still ends the process at once).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType


@dataclass(slots=True)
class StopSignals:
    """Whether a SIGTERM arrived, and whether one now stops the run like Ctrl-C."""

    terminated: bool = False
    forward: bool = True


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[StopSignals]:
    """Turn the first SIGTERM into Ctrl-C while `forward` is on (main thread only)."""
    state = StopSignals()
    if threading.current_thread() is not threading.main_thread():
        yield state  # signal handlers can only be set from the main thread
        return

    def handle(_signum: int, frame: FrameType | None) -> None:
        first = not state.terminated
        state.terminated = True
        if not (first and state.forward):
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
