"""Timestamped request traces (core): parse Mooncake, BurstGPT, Azure and JSONL traces.

A trace is a list of requests with send times and token lengths; Mooncake's also carry
`hash_ids`, one id per block of `block_tokens` prompt tokens (512 in the published traces),
equal ids meaning equal blocks. `load_trace` parses a file's text into a `Trace`: times made
relative to the first request, windowed (`start_s`, `duration_s`), scaled (`time_scale`) and
capped (`max_requests`). A bad file is one `UsageError` naming the file, line and field.
"""

from __future__ import annotations

from dataclasses import dataclass

TRACE_FORMATS = ("mooncake", "burstgpt", "azure", "jsonl")
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace.

    Attributes:
        offset_s: when to send it, seconds after the replay starts (scaled and windowed).
        input_len: prompt tokens.
        output_len: output tokens.
        hash_ids: one id per `Trace.block_tokens` prompt tokens (the last block may be
            partial); equal ids are equal blocks. None when the format has none.
        line: the line of the file it came from (1-based).
    """

    offset_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class Trace:
    """A parsed, windowed trace, in send order."""

    file: str
    format: str
    requests: tuple[TraceRequest, ...]
    time_scale: float = 1.0
    start_s: float = 0.0
    duration_s: float | None = None
    block_tokens: int | None = None  # tokens per hash id, when the requests carry them
