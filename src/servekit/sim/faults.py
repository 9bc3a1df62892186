"""Injected faults of the live simulator (core): parse fault values into one value.

Each fault reproduces a failure servekit must detect on a real deployment
(docs/engine-facts.md section 1):

- `crash-at-concurrency=N`: the engine dies with an illegal memory access when a step
  batches N or more requests (streams cut, 500s, /health 503).
- `corrupt-at-concurrency=N`: requests batched N or more at a time stream garbage
  (NUL bytes and U+FFFD) with status 200.
- `slow-start=SECONDS`: the port refuses connections for that long (scaled by the time
  scale), then /health answers 503 for a fifth of it, then the server is ready.
- `oom-at-startup`: the engine runs out of GPU memory while loading and the process exits.
- `drop-stream=P`: each stream is cut at a random point with probability P (0 < P <= 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from servekit.errors import UsageError

ACCEPTED_FORMS = (
    "crash-at-concurrency=N",
    "corrupt-at-concurrency=N",
    "slow-start=SECONDS",
    "oom-at-startup",
    "drop-stream=P",
)


@dataclass(frozen=True, slots=True)
class Faults:
    """The faults a simulated server injects; the default injects none.

    Attributes:
        crash_at_concurrency: batch size at which the engine crashes.
        corrupt_at_concurrency: batch size from which batched requests turn to garbage.
        slow_start_s: seconds (of simulated time) before the port listens.
        oom_at_startup: fail at startup with CUDA out of memory.
        drop_stream_p: probability that a stream is cut before its end.
    """

    crash_at_concurrency: int | None = None
    corrupt_at_concurrency: int | None = None
    slow_start_s: float = 0.0
    oom_at_startup: bool = False
    drop_stream_p: float = 0.0

    @property
    def warmup_s(self) -> float:
        """Seconds (simulated) /health answers 503 after the port starts listening."""
        return self.slow_start_s / 5


def _bad(name: str, value: str, why: str) -> UsageError:
    return UsageError(f"{name} {value!r}: {why}", fix=f"use one of: {', '.join(ACCEPTED_FORMS)}")


def _positive_int(name: str, value: str, text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise _bad(name, value, f"{text!r} is not a whole number") from None
    if number < 1:
        raise _bad(name, value, f"the concurrency must be at least 1, not {number}")
    return number


def _float(name: str, value: str, text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise _bad(name, value, f"{text!r} is not a number") from None
    if not math.isfinite(number):
        raise _bad(name, value, f"{text!r} is not a finite number")
    return number


def parse_fault(value: str, faults: Faults | None = None, *, name: str = "fault") -> Faults:
    """Return `faults` (default: none) with one more fault parsed from `value`.

    Errors quote the value after `name` (the CLI passes its flag, `--fault`).

    Raises:
        UsageError: the value is not one of the accepted forms, or repeats a fault.
    """
    faults = faults or Faults()
    kind, sep, arg = value.strip().partition("=")
    kind = kind.strip().lower()
    arg = arg.strip()
    if kind == "oom-at-startup":
        if sep:
            raise _bad(name, value, "oom-at-startup takes no value")
        if faults.oom_at_startup:
            raise _bad(name, value, "oom-at-startup is given twice")
        return replace(faults, oom_at_startup=True)
    if kind not in ("crash-at-concurrency", "corrupt-at-concurrency", "slow-start", "drop-stream"):
        raise _bad(name, value, f"unknown fault {kind!r}")
    if not arg:
        raise _bad(name, value, f"{kind} needs a value after '='")
    if kind == "slow-start":
        seconds = _float(name, value, arg)
        if seconds <= 0:
            raise _bad(name, value, f"slow-start needs a positive number of seconds, not {arg}")
        current: object = faults.slow_start_s or None
        updated = replace(faults, slow_start_s=seconds)
    elif kind == "drop-stream":
        p = _float(name, value, arg)
        if not 0 < p <= 1:
            raise _bad(name, value, f"drop-stream needs a probability P with 0 < P <= 1, not {arg}")
        current = faults.drop_stream_p or None
        updated = replace(faults, drop_stream_p=p)
    elif kind == "crash-at-concurrency":
        current = faults.crash_at_concurrency
        updated = replace(faults, crash_at_concurrency=_positive_int(name, value, arg))
    else:
        current = faults.corrupt_at_concurrency
        updated = replace(faults, corrupt_at_concurrency=_positive_int(name, value, arg))
    if current is not None:
        raise _bad(name, value, f"{kind} is given twice")
    return updated


def parse_faults(values: Iterable[str], *, name: str = "fault") -> Faults:
    """Parse every fault value into one `Faults` (errors name the value after `name`).

    Raises:
        UsageError: a value is malformed or a fault is given twice.
    """
    faults = Faults()
    for value in values:
        faults = parse_fault(value, faults, name=name)
    return faults
