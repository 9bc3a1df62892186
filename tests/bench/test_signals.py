"""SIGTERM becomes Ctrl-C while a bench run sends load, and is only noted otherwise."""

from __future__ import annotations

import os
import signal
import time

import pytest

from servekit.bench._signals import sigterm_as_interrupt


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
