"""Timestamped request traces (core): parse Mooncake, BurstGPT, Azure and JSONL traces.

A trace is a list of requests with send times and token lengths; Mooncake's also carry
`hash_ids`, one id per block of `block_tokens` prompt tokens (512 in the published traces),
equal ids meaning equal blocks. `load_trace` parses a file's text into a `Trace`: times made
relative to the first request, windowed (`start_s`, `duration_s`), scaled (`time_scale`) and
capped (`max_requests`). A bad file is one `UsageError` naming the file, line and field.
Each format's parser is a module of its own, `workload.trace_json` (Mooncake, jsonl) and
`workload.trace_csv` (BurstGPT, Azure), over `workload.trace_format`'s rows and formats.

The file's text is in memory (the CLI reads it whole, up to 4 GiB); it is parsed one line
at a time and parsing stops at the end of the window or the cap, so only the requests
replayed are parsed and kept. `implied_hits` says how many
prompt tokens a prefix cache should find for each request (the definition is in
docs/workloads.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servekit.errors import UsageError
from servekit.workload.trace_csv import AZURE, BURSTGPT
from servekit.workload.trace_format import Row, TraceFormat, counted, example, shown
from servekit.workload.trace_json import JSONL, MOONCAKE

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
    """A parsed, windowed trace, in send order.

    `skipped` counts the rows of the window that are no request to send: BurstGPT's failed
    requests (`Response tokens` 0).
    """

    file: str
    format: str
    requests: tuple[TraceRequest, ...]
    time_scale: float = 1.0
    start_s: float = 0.0
    duration_s: float | None = None
    block_tokens: int | None = None  # tokens per hash id, when the requests carry them
    skipped: int = 0


def load_trace(
    text: str,
    where: str,
    fmt: str,
    *,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
    max_model_len: int | None = None,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> Trace:
    """Parse a trace file's text into the requests to replay.

    Times are made relative to the file's first row; the window `[start_s, start_s +
    duration_s)` is taken on those unscaled times; the offsets are then made relative to the
    window's first request and multiplied by `time_scale` (0.5 replays twice as fast);
    `max_requests` keeps the window's first requests.

    Args:
        text: the file's text.
        where: the file's name, for errors.
        fmt: one of `TRACE_FORMATS`.
        time_scale: multiplies the trace's times.
        start_s: seconds into the trace where the window starts.
        duration_s: the window's length in trace seconds [to the end].
        max_requests: most requests kept.
        max_model_len: refuse a request whose input plus output tokens exceed it.
        block_tokens: prompt tokens per hash id.

    Raises:
        UsageError: an unknown format, a bad option, or a bad file (one line naming the
            file, line and field), an empty file or an empty window.
    """
    spec = _FORMATS.get(fmt)
    if spec is None:
        raise UsageError(
            f"trace format {fmt!r} is not one of {', '.join(TRACE_FORMATS)}",
            fix="pass --trace-format mooncake, burstgpt, azure or jsonl",
        )
    _check_window(time_scale, start_s, duration_s, max_requests, block_tokens)
    end_s = math.inf if duration_s is None else start_s + duration_s
    first: Row | None = None
    previous: Row | None = None
    origin: float | None = None  # the window's first request, in the file's unit
    kept: list[TraceRequest] = []
    skipped = 0
    to_offset_s = spec.seconds_per_unit * time_scale
    for row in spec.rows(text, where, spec, block_tokens):
        if previous is not None and row.time < previous.time:
            raise UsageError(
                f"{where}:{row.line}: {spec.time} {shown(row.time)} is before line "
                f"{previous.line}'s {shown(previous.time)}: the trace is not sorted by time",
                fix=f"sort the file by {spec.time}",
            )
        previous = row
        first = first or row
        since_s = (row.time - first.time) * spec.seconds_per_unit
        if since_s < start_s:
            continue
        if since_s >= end_s:
            break
        if row.failed:
            skipped += 1
            continue
        _check_fits(row, where, spec, max_model_len)
        origin = row.time if origin is None else origin
        offset_s = (row.time - origin) * to_offset_s
        kept.append(TraceRequest(offset_s, row.input_len, row.output_len, row.hash_ids, row.line))
        if max_requests is not None and len(kept) >= max_requests:
            break
    if first is None:
        raise UsageError(f"{where} holds no requests", fix=example(fmt))
    if not kept:
        last_s = ((previous or first).time - first.time) * spec.seconds_per_unit
        window = f"[{start_s:g} s, {'end' if duration_s is None else f'{end_s:g} s'})"
        raise UsageError(
            f"{where}: no request in the window {window} of a trace that spans "
            f"0 to {last_s:g} s"
            + (f" ({counted(skipped, 'failed row')} skipped)" if skipped else ""),
            fix="move --trace-start or widen --trace-duration into the trace",
        )
    requests = tuple(kept)
    del kept
    hashed = any(r.hash_ids is not None for r in requests)
    return Trace(
        file=where,
        format=fmt,
        requests=requests,
        time_scale=time_scale,
        start_s=start_s,
        duration_s=duration_s,
        block_tokens=block_tokens if hashed else None,
        skipped=skipped,
    )


def implied_hits(trace: Trace, *, granule: int = 1) -> list[int]:
    """Prompt tokens a prefix cache should find for each request, in send order.

    Equal hash ids are equal blocks and a partial (last) block is the start of the full
    block with its id, so a request shares with an earlier one every token up to the first
    hash id they differ on, and of the first block that is partial in either, the shorter
    length. A request's hit is the longest such common prefix with any earlier request,
    capped at `input_len - 1` (the last prompt token is always computed) and rounded down
    to whole `granule`-token blocks: the default (1) is what the trace itself implies; a
    server's block size gives what that server's cache can hold (vLLM caches whole blocks,
    so it finds the default figure less at most one of its blocks per request). A request
    without hash ids hits nothing. Eviction is not modelled: this is an unbounded cache.
    """
    if granule < 1:
        raise ValueError(f"granule must be a positive number of tokens, not {granule}")
    block = trace.block_tokens or MOONCAKE_BLOCK_TOKENS
    # A trie of every earlier request's leading chain: (parent node, hash id) -> node, and
    # per node the longest that block was in any earlier request holding that chain.
    children: dict[tuple[int, int], int] = {}
    longest: dict[int, int] = {}
    hits = []
    for request in trace.requests:
        ids = request.hash_ids or ()
        node, common = 0, 0
        for index, hash_id in enumerate(ids):
            child = children.get((node, hash_id))
            if child is None:
                break
            here = min(block, request.input_len - index * block)
            shared = min(here, longest[child])
            common += shared
            if shared < block:  # a partial block in either request ends the common run
                break
            node = child
        cap = request.input_len - 1
        hits.append(max(0, min(common, cap)) // granule * granule)
        node = 0
        for index, hash_id in enumerate(ids):
            node = children.setdefault((node, hash_id), len(children) + 1)
            here = min(block, request.input_len - index * block)
            longest[node] = max(longest.get(node, 0), here)
    return hits


def implied_hit_rate(trace: Trace, *, granule: int = 1) -> float | None:
    """The prefix-cache hit rate the trace implies (`implied_hits` over prompt tokens), or
    None when no request carries hash ids (nothing is implied)."""
    if not any(r.hash_ids is not None for r in trace.requests):
        return None
    prompt = sum(r.input_len for r in trace.requests)
    return sum(implied_hits(trace, granule=granule)) / prompt if prompt else None


def _check_window(
    time_scale: float,
    start_s: float,
    duration_s: float | None,
    max_requests: int | None,
    block_tokens: int,
) -> None:
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise UsageError(f"--time-scale {time_scale} must be a positive number", fix="e.g. 0.5")
    if not (math.isfinite(start_s) and start_s >= 0):
        raise UsageError(f"--trace-start {start_s} must be 0 or more seconds", fix="e.g. 60")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise UsageError(
            f"--trace-duration {duration_s} must be a positive number of seconds", fix="e.g. 30"
        )
    if max_requests is not None and max_requests < 1:
        raise UsageError(f"--max-requests {max_requests} must be 1 or more", fix="e.g. 200")
    if block_tokens < 1:
        raise UsageError(f"--trace-block-tokens {block_tokens} must be 1 or more", fix="512")


def _check_fits(row: Row, where: str, spec: TraceFormat, max_model_len: int | None) -> None:
    total = row.input_len + row.output_len
    if max_model_len is not None and total > max_model_len:
        raise UsageError(
            f"{where}:{row.line}: {spec.input_len} {row.input_len} + {spec.output_len} "
            f"{row.output_len} = {total} tokens exceeds max_model_len {max_model_len}",
            fix="window the trace past it (--trace-start, --max-requests) or serve a "
            "longer max_model_len",
        )


_FORMATS: dict[str, TraceFormat] = {f.name: f for f in (MOONCAKE, BURSTGPT, AZURE, JSONL)}


def mean_lengths(trace: Trace) -> tuple[int, int] | None:
    """The trace's mean input and output lengths in tokens (rounded), or None when empty."""
    if not trace.requests:
        return None
    count = len(trace.requests)
    return (
        round(sum(r.input_len for r in trace.requests) / count),
        round(sum(r.output_len for r in trace.requests) / count),
    )


def replay_rate(trace: Trace) -> float:
    """Mean send rate of a replay, requests/s: the requests over the scaled window when it
    has a duration, else over the span from the first send to the last (a replay whose
    requests share one time counts that span as one second, so the rate stays finite)."""
    count = len(trace.requests)
    if trace.duration_s is not None:
        return count / (trace.duration_s * trace.time_scale)
    span_s = trace.requests[-1].offset_s if trace.requests else 0.0
    return count / span_s if span_s > 0 else float(count)
