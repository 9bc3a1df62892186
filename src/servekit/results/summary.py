"""summary.json of a bench or sim run as one typed model (core), and its versioned loader.

Both `servekit bench` and `servekit sim run` build a `Summary` (docs/schemas/README.md); compare,
report and the time-scale conversion read its fields. `load_summary` is the one way a
summary read from a file becomes a `Summary`: it checks `schema_version` first.
"""

from __future__ import annotations

import types
from typing import ClassVar, Literal, Union, get_args, get_origin

from pydantic import JsonValue, ValidationError

from servekit.results._base import Document, DocumentError, RateOrInf, first_error

SUMMARY_VERSION: Literal[1] = 1
Stat = Literal["mean", "p50", "p90", "p99"]


class DistributionBlock(Document):
    """One metric's mean and percentiles (None without samples) and their 95% intervals."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    count: int
    ci95: dict[str, tuple[float, float]] | None

    def stat(self, name: Stat) -> float | None:
        """One statistic by name."""
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}[name]

    def interval(self, name: Stat) -> tuple[float, float] | None:
        """The 95% interval of one statistic, when there is one."""
        return (self.ci95 or {}).get(name)

    def scaled(self, factor: float) -> DistributionBlock:
        """The same distribution with every figure multiplied by `factor`."""

        def times(value: float | None) -> float | None:
            return None if value is None else value * factor

        ci = None
        if self.ci95 is not None:
            ci = {k: (lo * factor, hi * factor) for k, (lo, hi) in self.ci95.items()}
        return self.model_copy(
            update={"mean": times(self.mean), "p50": times(self.p50), "p90": times(self.p90),
                    "p99": times(self.p99), "ci95": ci}
        )  # fmt: skip


class ServerBlock(Document):
    """The server's view of a point: /metrics counter deltas and gauge maxima (or the
    simulator's counters); every figure is null when the server has no metrics, and the
    block is empty for a point cut short by Ctrl-C."""

    spec_acceptance_per_position: list[float] | None = None
    spec_acceptance_length: float | None = None
    spec_acceptance_rate: float | None = None
    kv_cache_usage_max: float | None = None
    preemptions: int | None = None
    running_max: int | None = None
    waiting_max: int | None = None
    generation_tokens: int | None = None
    # prefix-cache counter deltas, in tokens (vllm:prefix_cache_queries / _hits)
    prefix_cache_queries: int | None = None
    prefix_cache_hits: int | None = None
    # [seconds since the point started, KV usage, running, waiting]
    samples: list[list[float | int]] | None = None


class ClientBlock(Document):
    """The client's self-check of a point: valid when the client was not the bottleneck."""

    valid: bool
    warnings: list[str]
    loop_lag_ms_p99: float | None = None
    send_lag_ms_p99: float | None = None
    cpu_util: float | None = None
    workers: int | None = None

    v0_blank: ClassVar[dict[str, JsonValue]] = {"valid": True, "warnings": []}


class PrefixCacheBlock(Document):
    """Prefix-cache reuse during a point, as the server counted it (/metrics deltas of
    `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total`, in tokens, or the
    simulator's counters) and as usage reported it (`prompt_tokens_details.cached_tokens`);
    a figure is None where its source said nothing."""

    server_queried_tokens: int | None = None
    server_hit_tokens: int | None = None
    server_hit_rate: float | None = None
    client_prompt_tokens: int = 0  # usage prompt_tokens of the point's successful requests
    client_cached_tokens: int | None = None  # None: no response reported cached tokens
    client_hit_rate: float | None = None
    implied_hit_rate: float | None = None  # what the trace's shared blocks imply (replay)


class TurnBlock(Document):
    """One turn index across a point's sessions (turn 1 is every session's first request)."""

    turn: int
    requests: int
    failed: int
    ttft_ms: DistributionBlock
    itl_ms: DistributionBlock
    prompt_tokens_mean: float | None
    cached_tokens_mean: float | None  # None when no response of this turn reported them


class SessionsBlock(Document):
    """A point's sessions (multi-turn conversations or agent loops), from their records."""

    sessions: int  # sessions that sent at least one request
    completed: int  # session_end "completed"
    turn_limit: int  # agent loops stopped by the turn limit
    failed: int  # stopped by a failed request
    turns_completed_mean: float | None  # successful requests per session
    duration_s: DistributionBlock  # first send to last end, per session
    turns_per_s: float | None  # successful turns per second of the point
    tool_calls: int | None = None  # agent loops only: tool calls made
    tool_calls_per_session: float | None = None
    tool_args_invalid: int | None = None
    tool_args_invalid_rate: float | None = None  # invalid / tool calls
    stopped: int = 0  # cut short by the point's deadline (session_end "stopped")


class ScheduleBlock(Document):
    """How closely sends kept a timestamped schedule (trace replay): lag is sent - scheduled."""

    planned: int  # sends the schedule asked for in the point
    sent: int  # sends made (every one is a record)
    lag_ms: DistributionBlock
    max_lag_ms_p99: float  # the stated bound; the point is invalid past it
    valid: bool


class SummaryPoint(Document):
    """One load point of a run: counts, throughput, latency distributions, server, client."""

    concurrency: int | None
    rate_rps: RateOrInf | None
    completed: int
    failed: int
    errors: dict[str, int]
    duration_s: float
    output_tokens: int
    output_throughput_tok_s: float
    request_throughput_rps: float
    latency_s: DistributionBlock
    latency_from_schedule_s: DistributionBlock
    ttft_ms: DistributionBlock
    ttfo_ms: DistributionBlock
    itl_ms: DistributionBlock
    chunk_gap_ms: DistributionBlock
    tpot_ms: DistributionBlock
    per_stream_tok_s: DistributionBlock
    goodput_rps: float | None
    goodput_fraction: float | None
    server: ServerBlock
    client: ClientBlock
    prefix_cache: PrefixCacheBlock | None = None
    turns: list[TurnBlock] | None = None  # sessions and agent loops only
    sessions: SessionsBlock | None = None
    schedule: ScheduleBlock | None = None  # trace replay only
    # successful requests by the source of their tokens per chunk: token_ids, chunk_usage,
    # final_usage, one_per_chunk, engine (None: the records did not say)
    token_sources: dict[str, int] | None = None

    def distribution(self, key: str) -> DistributionBlock:
        """A latency or speed distribution by its summary.json key (KeyError if none)."""
        return {
            "latency_s": self.latency_s,
            "latency_from_schedule_s": self.latency_from_schedule_s,
            "ttft_ms": self.ttft_ms,
            "ttfo_ms": self.ttfo_ms,
            "itl_ms": self.itl_ms,
            "chunk_gap_ms": self.chunk_gap_ms,
            "tpot_ms": self.tpot_ms,
            "per_stream_tok_s": self.per_stream_tok_s,
        }[key]

    def figure(self, key: str) -> float | None:
        """A plain per-point figure by its summary.json key (KeyError if none)."""
        return {
            "output_throughput_tok_s": self.output_throughput_tok_s,
            "request_throughput_rps": self.request_throughput_rps,
            "goodput_rps": self.goodput_rps,
            "duration_s": self.duration_s,
        }[key]


class Target(Document):
    """What was measured: URL (None when simulated), model, server version, profile."""

    url: str | None
    model: str | None
    server_version: str | None
    profile: str | None
    model_info: dict[str, JsonValue] | None = None  # the server's /v1/models entry (bench)


class SloBlock(Document):
    """The SLO a run was judged by, in the one grammar of `analyze.slo` (`text`).

    Summaries written before that grammar hold bench's earlier per-request bounds instead
    (`ttft_ms`, `tpot_ms`, `e2e_s`, no `text`); they read as the same bounds at p99.
    """

    text: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_s: float | None = None


class TraceInfo(Document):
    """The trace a replay sent: its file, format and the window taken from it."""

    file: str
    format: str  # mooncake | burstgpt | azure | jsonl
    requests: int  # requests in the window (after --max-requests)
    time_scale: float
    start_s: float
    duration_s: float | None
    block_tokens: int | None = None  # tokens per hash id (mooncake: 512)
    implied_hit_rate: float | None = None
    skipped: int | None = None  # rows of the window that are no request (BurstGPT's failed)


class SessionInfo(Document):
    """The sessions a run sent: where they came from and how they pace themselves."""

    source: str  # "synthetic", or "sharegpt FILE" / "jsonl FILE"
    sessions: int
    turns_max: int  # most user turns in one session (agent loops: the turn limit)
    think_time: str | None = None  # the think-time distribution's spelling
    agent: bool = False
    tool_latency: str | None = None  # agent loops: the tool latency's spelling
    # sessions the sweep sends beyond the distinct conversations: repeats, each with its
    # own id (a#2) and a first message starting "[round 2] " (0: none repeated)
    repeated: int = 0


class Workload(Document):
    """The load that was sent: sizes, sampling and seed (bench adds its request options,
    sim run marks itself `simulated`)."""

    api: str | None = None
    input_len: int
    input_len_method: str | None = None
    # whether requests asked for each chunk's token ids (return_token_ids): bench probes the
    # server once; None where nothing was asked (sim run, a summary rebuilt from records)
    return_token_ids: bool | None = None
    output_len: int
    temperature: float | None  # None: not known (a summary rebuilt from records alone)
    requests_per_point: int
    warmup: int | None = None
    seed: int | None  # None: not known (a summary rebuilt from records alone)
    chat_template_kwargs: dict[str, JsonValue] | None = None
    slo: SloBlock | None = None
    duration_per_point_s: float | None = None
    tools: list[str | None] | None = None
    dataset_prompts: int | None = None
    shared_prefix: int | None = None
    workers: int | None = None
    simulated: bool | None = None
    trace: TraceInfo | None = None
    sessions: SessionInfo | None = None


class Summary(Document):
    """summary.json: one bench or sim run (docs/schemas/README.md)."""

    schema_version: Literal[1]
    servekit_version: str
    started_at: str
    target: Target
    workload: Workload
    points: list[SummaryPoint]
    command: list[str] | None = None  # the command line, credentials removed (bench)
    time_scale: float | None = None  # set when converted to simulated time
    times: str | None = None  # says how the times were converted
    # rebuilt from records.jsonl alone (no run.json): what the records could not tell
    unknown: list[str] | None = None


def load_summary(doc: object, *, where: str = "summary.json") -> Summary:
    """Validate a parsed summary.json into a Summary, by its schema_version.

    A summary without `schema_version` was written before it existed (version 0): it is read
    with what it lacks left empty (None, 0, no samples). Version 1 is read as it is.

    Raises:
        DocumentError: a version this servekit does not read, or an invalid document.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("points"), list):
        raise DocumentError(
            f"{where} has no points list: not a servekit summary.json",
            fix="pass a run directory written by servekit bench or servekit sim run",
        )
    version = doc.get("schema_version")
    legacy = "schema_version" not in doc
    if legacy:
        doc = _upgrade_v0(Summary, {**doc, "schema_version": SUMMARY_VERSION})
    elif isinstance(version, bool) or not isinstance(version, int):
        raise DocumentError(
            f"{where} has schema_version {version!r}, not a version number",
            fix=f"this servekit reads summary schema_version {SUMMARY_VERSION}",
        )
    elif version > SUMMARY_VERSION:
        raise DocumentError(
            f"{where} has summary schema_version {version}, newer than this servekit "
            f"reads ({SUMMARY_VERSION})",
            fix="upgrade servekit (pip install -U servekit) to read it",
        )
    elif version != SUMMARY_VERSION:
        raise DocumentError(
            f"{where} has summary schema_version {version}, which no servekit wrote",
            fix=f"this servekit reads schema_version {SUMMARY_VERSION} and files without one",
        )
    try:
        return Summary.model_validate(doc)
    except ValidationError as exc:
        shape = "the previous format (no schema_version)" if legacy else "schema_version 1"
        raise DocumentError(
            f"{where} is not a valid servekit summary of {shape}: {first_error(exc)}",
            fix="re-run the sweep with this servekit, or pass a summary.json it wrote",
        ) from None


def _upgrade_v0(model: type[Document], data: object) -> object:
    """Fill the keys a version 0 document lacks with empty values (recursively)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for name, field in model.model_fields.items():
        if name in out:
            out[name] = _upgrade_value(field.annotation, out[name])
        elif field.is_required():
            out[name] = _blank(field.annotation)
    return out


def _upgrade_value(annotation: object, value: object) -> object:
    if (sub := _document_in(annotation)) is not None:
        return _upgrade_v0(sub, value)
    if get_origin(annotation) is list and isinstance(value, list):
        item = _document_in(get_args(annotation)[0])
        if item is not None:
            return [_upgrade_v0(item, v) for v in value]
    return value


def _blank(annotation: object) -> object:
    if get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation):
        return None
    if (sub := _document_in(annotation)) is not None:
        return _upgrade_v0(sub, dict(sub.v0_blank))
    blanks: dict[object, object] = {int: 0, float: 0.0, str: "", list: [], dict: {}}
    return blanks.get(get_origin(annotation) or annotation)


def _document_in(annotation: object) -> type[Document] | None:
    """The Document class an annotation names (also inside `X | None`), or None."""
    if isinstance(annotation, type) and issubclass(annotation, Document):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, Document):
                return arg
    return None
