"""The traffic a run sends (core): one typed value for bench, sim run, tune and the demo.

A `Load` is what is sent, never where or how: the lengths (or a dataset, sessions, agent
loops, a trace), the sampling, the seed, the requests per point and the load levels. Each
command builds it once from its options (`servekit.cli._load`); bench turns it into its
request plan (`servekit.bench.spec.bench_points`), the simulator into its points
(`servekit.sim.load_points`), tune into the workload it searches (`TuneWorkload.of`).
A point's label is formatted here only (`Level.label`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from servekit.workload.datasets import LengthSpec, PromptItem
from servekit.workload.sessions import SessionsSpec
from servekit.workload.traces import Trace

TRACE_LABEL = "trace"
"""The label of a trace replay's one point."""


@dataclass(frozen=True, slots=True)
class Level:
    """One load level: a concurrency (closed loop) or an arrival rate (open loop), and its
    request count when it differs from the load's `requests_per_point` (the demo's)."""

    concurrency: int | None = None
    rate_rps: float | None = None
    requests: int | None = None

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate_rps is None):
            raise ValueError("a level is a concurrency or a rate, not both or neither")

    @property
    def label(self) -> str:
        """`c=N` or `rate=R` (R as %g; `rate=inf`: every request at once)."""
        if self.concurrency is not None:
            return f"c={self.concurrency}"
        assert self.rate_rps is not None
        return f"rate={self.rate_rps:g}"


@dataclass(frozen=True, slots=True)
class Load:
    """What a run sends at each of its load levels.

    Attributes:
        input_len: prompt tokens (sessions: new tokens per synthetic turn), a distribution.
        output_len: output tokens, a distribution.
        temperature: sampling temperature.
        seed: the seed of lengths, prompts and arrivals.
        requests_per_point: requests each point sends (sessions: `sessions` says).
        levels: the load levels, in order (a trace replay has none: its times are the load).
        arrival: the open loop's arrival process: poisson, gamma:SHAPE or constant.
        max_concurrency: an open loop's cap on requests in flight, or None.
        duration_per_point_s: a point also ends after this long, or None.
        api: "chat" or "completions".
        shared_prefix: tokens every synthetic prompt starts with.
        dataset: prompts from a file instead of synthetic ones, or None.
        tools: OpenAI tool definitions sent with chat requests (and answered by agents).
        sessions: multi-turn sessions or agent loops, or None.
        trace: a timestamped trace to replay, or None.
    """

    input_len: LengthSpec
    output_len: LengthSpec
    temperature: float
    seed: int = 0
    requests_per_point: int = 64
    levels: tuple[Level, ...] = ()
    arrival: str = "poisson"
    max_concurrency: int | None = None
    duration_per_point_s: float | None = None
    api: str = "chat"
    shared_prefix: int = 0
    dataset: tuple[PromptItem, ...] | None = None
    tools: tuple[dict[str, Any], ...] = ()
    sessions: SessionsSpec | None = None
    trace: Trace | None = None

    @property
    def kind(self) -> str:
        """fixed, dataset, sessions, agent or trace."""
        if self.trace is not None:
            return "trace"
        if self.sessions is not None:
            return "agent" if self.sessions.agent is not None else "sessions"
        return "dataset" if self.dataset is not None else "fixed"

    @property
    def labels(self) -> tuple[str, ...]:
        """Every point's label, in order."""
        if self.trace is not None:
            return (TRACE_LABEL,)
        return tuple(level.label for level in self.levels)


def point_seed(seed: int, index: int) -> int:
    """The seed of point `index` of a run seeded `seed` (its arrivals; the simulator's
    engine for that point too)."""
    return seed * 1_000_003 + index


def point_rng(seed: int, index: int) -> random.Random:
    """The generator of point `index`'s open-loop arrivals, the same in bench and in the
    simulator, so both send one schedule."""
    return random.Random(point_seed(seed, index))  # noqa: S311 - reproducible, not secret
