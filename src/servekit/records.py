"""Per-request records (core values + JSONL edge): what every load test and simulation writes.

One `RequestRecord` per request, one JSON line each, appended and flushed as the request
ends so a killed run loses nothing (docs/schemas/README.md). Times are integer nanoseconds on
one monotonic clock; a simulated run uses its virtual clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from servekit import jsontext
from servekit.errors import ServekitError


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request's timeline and outcome.

    Attributes:
        id: request id, unique within a run.
        point: label of the load point (e.g. "c=4").
        scheduled_ns: intended send time (open loop) or slot time (closed loop).
        sent_ns: when the request was handed to the connection (t0).
        first_token_ns: first chunk carrying any generated token, or None.
        first_answer_ns: first content or tool-call token (after reasoning), or None.
        end_ns: when the response ended (or failed).
        chunk_ns: arrival time of every chunk that delivered tokens, whatever its text (a
            token that decodes to nothing is delivered too).
        chunk_tokens: tokens carried by each of those chunks.
        prompt_tokens: prompt length (server usage when available).
        output_tokens: generated tokens (server usage when available).
        reasoning_tokens: generated tokens that were reasoning.
        finish_reason: the server's finish reason, or None.
        error_kind: failure class, or None for success.
        error: failure message, or None.
        text: optional generated text.
        cached_tokens: prompt tokens the server served from its prefix cache (usage
            `prompt_tokens_details.cached_tokens`), or None when it did not say.
        session: the session (multi-turn conversation or agent loop) this request belongs
            to, or None for a single-turn request.
        turn: the request's 1-based index within its session, or None.
        session_end: set on a session's last request only: "completed" (every turn
            answered; an agent answered without a tool call), "turn_limit" (an agent hit
            its turn limit), "failed" (this request failed, the session stopped) or
            "stopped" (the point's deadline came before the session's next request). A
            session cut by Ctrl-C or SIGTERM has no end: its request in flight writes no
            record and its last record, written while it went on, holds None.
        tool_calls: tool calls in this response.
        tool_args_invalid: of those, calls whose arguments are not JSON or fail the tool's
            JSON schema (or name no known tool).
        text_chunks: how many chunks carried reasoning or content text (a separate fact:
            tokens that decode to nothing, a character split over tokens and text a parser
            holds back make it differ from the deliveries).
        token_source: where `chunk_tokens` came from: "token_ids" (the server's ids on
            each chunk), "chunk_usage" (usage on every chunk), "final_usage" (the final
            count spread over the chunks), "one_per_chunk" (no count at all), "engine"
            (the offline simulator), or None (a record written before servekit said).
    """

    id: str
    point: str
    scheduled_ns: int
    sent_ns: int
    first_token_ns: int | None
    first_answer_ns: int | None
    end_ns: int
    chunk_ns: tuple[int, ...] = field(default=())
    chunk_tokens: tuple[int, ...] = field(default=())
    prompt_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str | None = None
    error_kind: str | None = None
    error: str | None = None
    text: str | None = None
    cached_tokens: int | None = None
    session: str | None = None
    turn: int | None = None
    session_end: str | None = None
    tool_calls: int = 0
    tool_args_invalid: int = 0
    text_chunks: int = 0
    token_source: str | None = None

    # Validation of records read back from JSON: unknown keys are errors.
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    @property
    def ok(self) -> bool:
        """True when the request succeeded."""
        return self.error_kind is None

    # The per-request figures of docs/metrics.md, defined once. (The analysis computes
    # them over arrays of many records; a test checks both give the same values.)
    @property
    def ttft_ms(self) -> float | None:
        """Time to first token (ms): from t0 to the first chunk that carried a token."""
        if self.first_token_ns is None:
            return None
        return (self.first_token_ns - self.sent_ns) / 1e6

    @property
    def ttfo_ms(self) -> float | None:
        """Time to first output (ms): to the first content or tool-call token."""
        if self.first_answer_ns is None:
            return None
        return (self.first_answer_ns - self.sent_ns) / 1e6

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first (ms): the first to the last delivery over
        output_tokens - 1; None for an answer of one token or one delivery."""
        if self.output_tokens <= 1 or len(self.chunk_ns) <= 1:
            return None
        return (self.chunk_ns[-1] - self.chunk_ns[0]) / 1e6 / (self.output_tokens - 1)

    @property
    def e2e_s(self) -> float:
        """End-to-end latency (s): from t0 to the end of the response."""
        return (self.end_ns - self.sent_ns) / 1e9

    def to_json_line(self) -> str:
        """Return the record as one JSON line (no trailing newline)."""
        # A shallow dict: every field is a scalar or a tuple of ints, which JSON writes as a
        # list. (dataclasses.asdict deep-copies each of the 2 x chunks values: ~1.6 ms for a
        # 256-chunk record, measured, which halved the client's throughput ceiling.)
        values = {name: getattr(self, name) for name in _FIELD_NAMES}
        return jsontext.dumps(values, separators=(",", ":"), what="a request record")


_FIELD_NAMES = tuple(f.name for f in fields(RequestRecord))
_INT_FIELDS = (
    "scheduled_ns", "sent_ns", "first_token_ns", "first_answer_ns", "end_ns",
    "prompt_tokens", "output_tokens", "reasoning_tokens", "cached_tokens", "turn",
    "tool_calls", "tool_args_invalid", "text_chunks",
)  # fmt: skip


class RecordFormatError(ServekitError):
    """A records.jsonl line is not a valid RequestRecord."""


def record_from_json(line: str | bytes, *, where: str = "record") -> RequestRecord:
    """Parse and validate one JSON line into a RequestRecord.

    Raises:
        RecordFormatError: the line is not JSON or not a valid record (one line: where,
            the first problem, and how many more there are).
    """
    try:
        record = _ADAPTER.validate_json(line)
    except ValidationError as exc:
        raise RecordFormatError(
            f"{where}: not a valid request record ({_first_problem(exc)})",
            fix="pass records.jsonl as servekit bench or sim run wrote it",
        ) from None
    if problem := _inconsistency(record):
        raise RecordFormatError(
            f"{where}: not a valid request record ({problem})",
            fix="pass records.jsonl as servekit bench or sim run wrote it",
        )
    return record


SESSION_ENDS = ("completed", "turn_limit", "failed", "stopped")
TOKEN_SOURCES = ("token_ids", "chunk_usage", "final_usage", "one_per_chunk", "engine")
"""Where a record's tokens per chunk came from (`RequestRecord.token_source`), the most
trusted first."""
"""How a session ended (`RequestRecord.session_end`)."""

_INT64 = range(-(2**63), 2**63)
MAX_REQUEST_TOKENS = 1 << 27
"""Most tokens one request can carry: the largest max_model_len a profile may set. The
analysis makes one ITL sample per token, so a count past it (a server's 10^15) is refused
here rather than exhausting memory there."""


def _inconsistency(record: RequestRecord) -> str | None:
    """What no record servekit writes can hold: chunk lists of different lengths, an
    integer past 64 bits (the analysis keeps times and counts in int64 arrays), more
    invalid tool calls than calls, or a turn or session end outside a session."""
    if len(record.chunk_ns) != len(record.chunk_tokens):
        return (
            f"{len(record.chunk_ns)} chunk_ns but {len(record.chunk_tokens)} chunk_tokens; "
            "they pair up"
        )
    for name in _INT_FIELDS:
        value = getattr(record, name)
        if value is not None and value not in _INT64:
            return f"{name}: outside the 64-bit integer range"
    if any(v not in _INT64 for v in (*record.chunk_ns, *record.chunk_tokens)):
        return "chunk_ns or chunk_tokens: a value outside the 64-bit integer range"
    if any(v < 0 for v in record.chunk_tokens) or record.output_tokens < 0:
        return "a negative token count"
    if min(record.cached_tokens or 0, record.tool_calls, record.tool_args_invalid,
           record.text_chunks) < 0:  # fmt: skip
        return "a negative cached_tokens, tool_calls, tool_args_invalid or text_chunks"
    if record.token_source is not None and record.token_source not in TOKEN_SOURCES:
        return f"token_source: not one of {', '.join(TOKEN_SOURCES)}"
    if record.tool_args_invalid > record.tool_calls:
        return (
            f"tool_args_invalid {record.tool_args_invalid} is more than tool_calls "
            f"{record.tool_calls}"
        )
    if record.turn is not None and record.turn < 1:
        return f"turn {record.turn}: turns count from 1"
    if record.session is None and (record.turn is not None or record.session_end is not None):
        return "turn or session_end without a session"
    if record.session_end is not None and record.session_end not in SESSION_ENDS:
        return f"session_end: not one of {', '.join(SESSION_ENDS)}"
    if max(record.output_tokens, sum(record.chunk_tokens)) > MAX_REQUEST_TOKENS:
        return f"more than {MAX_REQUEST_TOKENS} tokens in one request"
    return None


def _first_problem(exc: ValidationError) -> str:
    """The first validation problem in one short line (keys from the file are escaped)."""
    err = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in err["loc"])
    where = where.encode("unicode_escape").decode("ascii")
    where = where if len(where) <= 60 else where[:57] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where + ': ' if where else ''}{err['msg']}{more}"


_ADAPTER = TypeAdapter(RequestRecord)
