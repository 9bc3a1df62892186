"""SIGTERM becomes Ctrl-C while a bench run sends load, and is only noted otherwise."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.bench.signals import sigterm_as_interrupt
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.summary import run_bench
from servekit.errors import Terminated
from servekit.records import RequestRecord


def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)  # the handler runs between bytecodes of the main thread


def test_sigterm_runs_the_sigint_handler() -> None:
    """While forwarding, SIGTERM does what Ctrl-C does (here: KeyboardInterrupt)."""
    with sigterm_as_interrupt() as signals:
        with pytest.raises(KeyboardInterrupt):
            _sigterm_self()
        assert signals.terminated


def test_sigterm_is_only_noted_while_the_summary_is_written() -> None:
    """With forwarding off, or after the first SIGTERM, a SIGTERM raises nothing."""
    with sigterm_as_interrupt() as signals:
        signals.forward = False
        _sigterm_self()
        assert signals.terminated
        signals.forward = True
        _sigterm_self()  # a second SIGTERM is noted, not forwarded


def test_the_previous_handler_comes_back() -> None:
    """Leaving the block restores the SIGTERM handler that was there."""
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


class _SigtermOnFirstRecord:
    """A live sink that sends this process SIGTERM as the first record arrives: the
    handler then runs inside a task of the run's event loop, every time."""

    def start_point(self, label: str, total: int) -> None:
        """Nothing to draw."""

    def record(self, record: RequestRecord) -> None:
        """The first record: SIGTERM to this process (later ones come after the stop)."""
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored, as in a background job of a non-interactive shell."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.integration
@pytest.mark.usefixtures("sigint_ignored")
def test_sigterm_inside_a_task_leaves_no_task_exception(
    tmp_path: Path,
    start_server: Callable[..., tuple[Any, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGTERM while a task of the run executes, SIGINT ignored: the run stops as SIGTERM
    (summary written) and asyncio logs no "Task exception was never retrieved"."""
    _, url = start_server()
    spec = BenchSpec(url, "", input_len=8, output_len=4, requests_per_point=500)
    caplog.set_level(logging.ERROR, logger="asyncio")
    with pytest.raises(Terminated, match="stopped by SIGTERM") as stop:
        run_bench(spec, [PointSpec("c=2", concurrency=2)], tmp_path, version="t",
                  live=_SigtermOnFirstRecord())  # fmt: skip
    del stop  # its traceback would keep the run's tasks alive past the collection
    gc.collect()  # an unretrieved task exception is logged when the task is collected
    assert [r.getMessage() for r in caplog.records] == []
    assert (tmp_path / "summary.json").is_file()


@pytest.mark.parametrize("sigint", ["ignored", "default"])
def test_a_loop_stopped_from_a_sub_task_raises_after_it_closed(
    sigint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM while a sub-task runs (SIGINT ignored or not): the loop's tasks are
    cancelled, KeyboardInterrupt comes after the loop, and asyncio logs nothing."""
    cancelled: list[bool] = []

    async def sub_task() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs inside this task
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        await asyncio.gather(sub_task(), asyncio.sleep(60))

    before = signal.getsignal(signal.SIGINT)
    if sigint == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    caplog.set_level(logging.ERROR, logger="asyncio")
    try:
        with sigterm_as_interrupt() as signals, pytest.raises(KeyboardInterrupt) as stop:
            signals.run(main())
    finally:
        signal.signal(signal.SIGINT, before)
    del stop
    gc.collect()
    assert signals.terminated
    assert cancelled == [True]
    assert [r.getMessage() for r in caplog.records] == []


def test_a_loop_run_without_a_signal_returns_its_value() -> None:
    """`run` is asyncio.run when no SIGTERM comes: the coroutine's value comes back."""

    async def main() -> int:
        await asyncio.sleep(0)
        return 7

    with sigterm_as_interrupt() as signals:
        assert signals.run(main()) == 7
        assert signals.stop_loop is None
