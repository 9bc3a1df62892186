"""Synthetic prompts and arrival times (core): deterministic, distinct, sized in tokens.

Prompts are sequences of distinct words drawn from a seeded generator, so no two requests
share a prefix (no accidental prefix-cache hits). Their exact token length is fitted with
the server's own tokenizer by the caller (`bench.sizing`); here `words` only builds them.
"""

from __future__ import annotations

import math
import random

from servekit.errors import UsageError

_SYLLABLES = (
    "ka", "lo", "mi", "ne", "so", "ta", "ru", "vi", "de", "po", "zu", "fa", "gi", "ho", "ja",
    "be", "co", "di", "el", "fu", "ga", "hi", "io", "ke",
)  # fmt: skip


def words(count: int, rng: random.Random) -> str:
    """Return `count` pseudo-words separated by spaces, deterministic for the RNG state."""
    picks = rng.choices(_SYLLABLES, k=count * 3)
    return " ".join("".join(picks[i : i + 3]) for i in range(0, count * 3, 3))


def poisson_arrivals(rate_rps: float, count: int, rng: random.Random) -> list[float]:
    """Arrival offsets in seconds of a Poisson process with the given rate."""
    t = 0.0
    out = []
    for _ in range(count):
        t += rng.expovariate(rate_rps)
        out.append(t)
    return out


def gamma_arrivals(rate_rps: float, shape: float, count: int, rng: random.Random) -> list[float]:
    """Arrival offsets with gamma-distributed gaps (mean 1/rate; shape < 1 is burstier)."""
    t = 0.0
    out = []
    for _ in range(count):
        t += rng.gammavariate(shape, 1.0 / (rate_rps * shape))
        out.append(t)
    return out


def constant_arrivals(rate_rps: float, count: int) -> list[float]:
    """Evenly spaced arrival offsets."""
    return [(i + 1) / rate_rps for i in range(count)]


def arrival_offsets(arrival: str, rate_rps: float, count: int, rng: random.Random) -> list[float]:
    """Arrival offsets in seconds of `count` requests for an arrival process by its spelling.

    Args:
        arrival: `poisson`, `constant` or `gamma:SHAPE` (see `check_arrival`).
        rate_rps: mean arrival rate, requests per second; infinity sends all at offset 0.
        count: how many arrivals.
        rng: draws the gaps (unused by `constant`).
    """
    check_arrival(arrival)
    if math.isinf(rate_rps):  # "as fast as possible": every request at once, no pacing
        return [0.0] * count
    if arrival == "constant":
        return constant_arrivals(rate_rps, count)
    if arrival.startswith("gamma:"):
        return gamma_arrivals(rate_rps, float(arrival.partition(":")[2]), count, rng)
    return poisson_arrivals(rate_rps, count, rng)


def check_arrival(text: str, *, name: str = "arrival process") -> None:
    """Accept `poisson`, `constant` or `gamma:SHAPE` with a positive finite SHAPE.

    Errors quote the text after `name` (the CLI passes its flag, `--arrival`).

    Raises:
        UsageError: anything else.
    """
    head, _, shape = text.partition(":")
    if text in ("poisson", "constant"):
        return
    try:
        if head == "gamma" and math.isfinite(float(shape)) and float(shape) > 0:
            return
    except ValueError:
        pass
    raise UsageError(
        f"{name} {text!r} is not poisson, constant or gamma:SHAPE",
        fix="SHAPE is a positive number, e.g. gamma:0.5",
    )
