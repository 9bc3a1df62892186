"""What a load test sends and what a point produced (core): plain value types.

`BenchSpec` (the run), `PointSpec` (one load level), `Planned` (one request to send) and
`PointOutcome` (a finished point). They live apart from the runner so prompt sizing, the
worker pool and the CLI can name them without importing the asyncio runner.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

from servekit.records import RequestRecord
from servekit.redaction import Redactor
from servekit.results.summary import ClientBlock, ServerBlock
from servekit.workload.datasets import LengthSpec, PromptItem
from servekit.workload.load import TRACE_LABEL, Load
from servekit.workload.sessions import SessionsSpec
from servekit.workload.traces import Trace, replay_rate


@dataclass(frozen=True, slots=True)
class BenchSpec:
    """What to send and where."""

    base_url: str
    model: str
    api: str = "chat"
    input_len: int = 1024
    output_len: int = 128
    temperature: float = 0.0
    requests_per_point: int = 64
    warmup: int = 0
    seed: int = 0
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # holds the API key
    redactor: Redactor = field(default_factory=Redactor, repr=False)  # the key, a password
    chat_template_kwargs: dict[str, Any] | None = None
    timeout_s: float = 600.0
    input_dist: LengthSpec | None = None  # overrides input_len when set
    output_dist: LengthSpec | None = None  # overrides output_len when set
    dataset: tuple[PromptItem, ...] | None = None  # prompts from a file instead of synthetic
    shared_prefix: int = 0  # tokens every synthetic prompt starts with (prefix caching)
    tokenizer: str | None = None  # local tokenizer.json when the server has no /tokenize
    duration_per_point_s: float | None = None  # a point also ends when this much time passed
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI tool definitions sent with chat requests
    workers: int = 1  # processes that send the load (records merge in this one)
    min_tokens: bool = False  # also pin the length with min_tokens (servers without ignore_eos)
    metrics_interval_s: float = 0.25  # /metrics sampling during a point; 0: before/after only
    trace: Trace | None = None  # replay a timestamped trace (one point, "trace")
    sessions: SessionsSpec | None = None  # multi-turn sessions or agent loops per point
    max_schedule_lag_ms: float = 10.0  # a replay point is invalid past this p99 send lag
    # ask for each chunk's token ids (return_token_ids): None probes the server once and
    # asks when it answers with them; False never asks (counts then come from usage)
    token_ids: bool | None = None


@dataclass(frozen=True, slots=True)
class Planned:
    """One request to send: its body and the output length it must produce."""

    body: dict[str, Any]
    output_len: int


@dataclass(frozen=True, slots=True)
class PointSpec:
    """One load level."""

    label: str
    concurrency: int | None = None
    rate_rps: float | None = None
    arrival: str = "poisson"  # poisson | gamma:SHAPE | constant
    max_concurrency: int | None = None
    requests: int | None = None  # this point's request count [BenchSpec.requests_per_point]
    schedule: tuple[float, ...] | None = None  # explicit send offsets (s): a trace replay

    def planned_sends(self, requests_per_point: int) -> int | None:
        """Sends an explicit schedule asks for (up to the point's request count, else
        `requests_per_point`); None for a point without one."""
        if self.schedule is None:
            return None
        return min(len(self.schedule), self.requests or requests_per_point)


@dataclass(frozen=True, slots=True)
class PointOutcome:
    """A finished point: its records and the server's view of it."""

    spec: PointSpec
    records: list[RequestRecord]
    server: ServerBlock
    warnings: list[str]
    client: ClientBlock | None = None  # None: valid unless there are warnings


class ProgressSink(Protocol):
    """What a load test reports while it runs (a live display, or nothing): a point begins,
    a request ends. Injected by the caller so the runner draws nothing itself."""

    def start_point(self, label: str, total: int) -> None:
        """A point of `total` requests begins."""

    def record(self, record: RequestRecord) -> None:
        """One request of the current point ended."""


def bench_spec(load: Load, target: BenchSpec) -> BenchSpec:
    """`target` (where to send, and how) sending `load`: the one place a load becomes
    bench's spec (the load's fields replace the target's)."""
    return dataclasses.replace(
        target,
        api=load.api,
        input_len=load.input_len.mean,
        output_len=load.output_len.mean,
        temperature=load.temperature,
        requests_per_point=load.requests_per_point,
        seed=load.seed,
        input_dist=load.input_len if load.input_len.kind != "fixed" else None,
        output_dist=load.output_len if load.output_len.kind != "fixed" else None,
        dataset=load.dataset,
        shared_prefix=load.shared_prefix,
        duration_per_point_s=load.duration_per_point_s,
        tools=load.tools,
        trace=load.trace,
        sessions=load.sessions,
    )


def bench_points(load: Load) -> list[PointSpec]:
    """bench's points for a load: one per level, or a trace replay's one point, which sends
    the trace's requests at its offsets (its `rate_rps` is the replay's mean rate)."""
    if load.trace is not None:
        offsets = tuple(r.offset_s for r in load.trace.requests)
        rate = replay_rate(load.trace)
        return [PointSpec(TRACE_LABEL, rate_rps=rate, schedule=offsets, requests=len(offsets))]
    return [
        PointSpec(level.label, concurrency=level.concurrency, requests=level.requests)
        if level.concurrency is not None
        else PointSpec(
            level.label,
            rate_rps=level.rate_rps,
            arrival=load.arrival,
            max_concurrency=load.max_concurrency,
            requests=level.requests,
        )
        for level in load.levels
    ]
