"""Timestamped request traces (core): parse Mooncake, BurstGPT, Azure and JSONL traces.

A trace is a list of requests with send times and token lengths; Mooncake's also carry
`hash_ids`, one id per block of `block_tokens` prompt tokens (512 in the published traces),
equal ids meaning equal blocks. `load_trace` parses a file's text into a `Trace`: times made
relative to the first request, windowed (`start_s`, `duration_s`), scaled (`time_scale`) and
capped (`max_requests`). A bad file is one `UsageError` naming the file, line and field.

The file's text is in memory (the CLI reads it whole, up to 4 GiB); it is parsed one line
at a time and parsing stops at the end of the window or the cap, so only the requests
replayed are parsed and kept. `implied_hits` says how many
prompt tokens a prefix cache should find for each request (the definition is in
docs/workloads.md).
"""

from __future__ import annotations

import calendar
import csv
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from servekit import jsontext
from servekit.errors import UsageError

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


class _Row(NamedTuple):
    """One parsed row: its time in the file's unit (`_Format.seconds_per_unit`), lengths,
    hash ids (a tuple: cheap, as a trace may hold millions)."""

    time: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None
    line: int
    failed: bool = False


@dataclass(frozen=True, slots=True)
class _Format:
    """How one format spells its fields and its time unit."""

    time: str
    time_unit: str  # as errors and docs say it
    seconds_per_unit: float
    input_len: str
    output_len: str
    rows: Callable[[str, str, _Format, int], Iterator[_Row]]


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
    first: _Row | None = None
    previous: _Row | None = None
    origin: float | None = None  # the window's first request, in the file's unit
    kept: list[TraceRequest] = []
    skipped = 0
    to_offset_s = spec.seconds_per_unit * time_scale
    for row in spec.rows(text, where, spec, block_tokens):
        if previous is not None and row.time < previous.time:
            raise UsageError(
                f"{where}:{row.line}: {spec.time} {_shown(row.time)} is before line "
                f"{previous.line}'s {_shown(previous.time)}: the trace is not sorted by time",
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
        raise UsageError(f"{where} holds no requests", fix=_example(fmt))
    if not kept:
        last_s = ((previous or first).time - first.time) * spec.seconds_per_unit
        window = f"[{start_s:g} s, {'end' if duration_s is None else f'{end_s:g} s'})"
        raise UsageError(
            f"{where}: no request in the window {window} of a trace that spans "
            f"0 to {last_s:g} s"
            + (f" ({_count(skipped, 'failed row')} skipped)" if skipped else ""),
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


def _check_fits(row: _Row, where: str, spec: _Format, max_model_len: int | None) -> None:
    total = row.input_len + row.output_len
    if max_model_len is not None and total > max_model_len:
        raise UsageError(
            f"{where}:{row.line}: {spec.input_len} {row.input_len} + {spec.output_len} "
            f"{row.output_len} = {total} tokens exceeds max_model_len {max_model_len}",
            fix="window the trace past it (--trace-start, --max-requests) or serve a "
            "longer max_model_len",
        )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _shown(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _example(fmt: str) -> str:
    return {
        "mooncake": 'write lines like {"timestamp": 0, "input_length": 600, '
        '"output_length": 40, "hash_ids": [0, 1]}',
        "burstgpt": "write a header 'Timestamp,Model,Request tokens,Response tokens,"
        "Total tokens,Log Type' and one row per request",
        "azure": "write a header 'TIMESTAMP,ContextTokens,GeneratedTokens' and one row per request",
        "jsonl": 'write lines like {"timestamp_s": 0.0, "input_len": 600, "output_len": 40}',
    }[fmt]


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """Numbered lines of `text`, split at line feeds only (never at U+2028, U+0085 or a form
    feed, which a JSON string may hold), a carriage return before one dropped, without
    copying the text whole (a 1 GB trace stays 1 GB)."""
    start, number, size = 0, 0, len(text)
    while start < size:
        end = text.find("\n", start)
        end = size if end == -1 else end
        number += 1
        yield number, text[start:end].rstrip("\r")
        start = end + 1


def json_object_lines(
    text: str, where: str, *, fix: str
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, `where:line`, object) for every non-blank line of a JSON-lines text.

    Raises:
        UsageError: a line that is not JSON or not a JSON object, naming it, with `fix`.
    """
    for number, line in numbered_lines(text.lstrip("\ufeff")):
        if not line.strip():
            continue
        loc = f"{where}:{number}"
        try:
            obj: Any = jsontext.loads_standard(line)
        except jsontext.LOAD_FAILURES as exc:
            raise UsageError(f"{loc}: not JSON ({jsontext.load_problem(exc)})", fix=fix) from None
        if not isinstance(obj, dict):
            raise UsageError(f"{loc}: each line must be a JSON object", fix=fix)
        yield number, loc, obj


# ---- JSON lines: mooncake and servekit's own


def _json_rows(text: str, where: str, spec: _Format, block_tokens: int) -> Iterator[_Row]:
    needs_hashes = spec is _FORMATS["mooncake"]
    fix = _example(_format_name(spec))
    for number, loc, obj in json_object_lines(text, where, fix=fix):
        time = _json_time(obj.get(spec.time), loc, spec)
        input_len = _json_count(obj.get(spec.input_len), loc, spec.input_len)
        output_len = _json_count(obj.get(spec.output_len), loc, spec.output_len)
        raw_ids = obj.get("hash_ids")
        if raw_ids is None and needs_hashes:
            raise UsageError(f"{loc}: hash_ids is missing", fix=_example("mooncake"))
        ids = None if raw_ids is None else _hash_ids(raw_ids, loc, spec, input_len, block_tokens)
        yield _Row(time, input_len, output_len, ids, number)


def _format_name(spec: _Format) -> str:
    """The name of a format in `TRACE_FORMATS`."""
    return next(name for name, known in _FORMATS.items() if known is spec)


def _json_time(value: object, loc: str, spec: _Format) -> float:
    if value is None:
        raise UsageError(
            f"{loc}: {spec.time} is missing", fix=f"give {spec.time} in {spec.time_unit}"
        )
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(
            f"{loc}: {spec.time} {value!r} is not a number", fix=f"give it in {spec.time_unit}"
        )
    if value < 0:
        raise UsageError(
            f"{loc}: {spec.time} {_shown(value)} is negative",
            fix=f"give {spec.time} as {spec.time_unit} since the trace's start (0 or more)",
        )
    return float(value)


def _json_count(value: object, loc: str, field: str) -> int:
    if value is None:
        raise UsageError(f"{loc}: {field} is missing", fix=f"give {field} in tokens")
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(
            f"{loc}: {field} {value!r} is not a whole number", fix=f"give {field} in tokens"
        )
    if value <= 0:
        raise UsageError(f"{loc}: {field} {value} must be positive", fix="at least 1 token")
    return value


def _hash_ids(
    value: object, loc: str, spec: _Format, input_len: int, block_tokens: int
) -> tuple[int, ...]:
    if type(value) is not list or not all(type(v) is int for v in value):  # no bools
        raise UsageError(f"{loc}: hash_ids must be a list of integers", fix="e.g. [0, 1, 2]")
    blocks = -(-input_len // block_tokens)
    if len(value) != blocks:
        raise UsageError(
            f"{loc}: hash_ids holds {_count(len(value), 'id')} but {spec.input_len} "
            f"{input_len} is {_count(blocks, 'block')} of {block_tokens} tokens",
            fix="one id per block (the last may be partial); --trace-block-tokens sets the "
            "block size",
        )
    return tuple(value)


# ---- CSV: BurstGPT and Azure


def _csv_rows(text: str, where: str, spec: _Format, block_tokens: int) -> Iterator[_Row]:
    del block_tokens  # CSV traces carry no hash ids
    lines = (line for _, line in numbered_lines(text.lstrip("\ufeff")))
    reader = csv.reader(lines)
    header = next(reader, None)
    while header is not None and not any(cell.strip() for cell in header):
        header = next(reader, None)
    if header is None:
        return
    names = [cell.strip() for cell in header]
    columns = {}
    for field in (spec.time, spec.input_len, spec.output_len):
        if field not in names:
            raise UsageError(
                f"{where}:{reader.line_num}: no {field!r} column in the header "
                f"({', '.join(repr(n) for n in names)})",
                fix=_example(_format_name(spec)),
            )
        columns[field] = names.index(field)
    burst = spec is _FORMATS["burstgpt"]
    for cells in reader:
        if not any(cell.strip() for cell in cells):
            continue
        number = reader.line_num
        loc = f"{where}:{number}"
        values = {}
        for field, index in columns.items():
            if index >= len(cells) or not cells[index].strip():
                raise UsageError(f"{loc}: {field} is missing", fix=_example(_format_name(spec)))
            values[field] = cells[index].strip()
        time = (
            _csv_seconds(values[spec.time], loc, spec)
            if burst
            else _azure_time(values[spec.time], loc, spec)
        )
        input_len = _csv_count(values[spec.input_len], loc, spec.input_len, zero_ok=False)
        output_len = _csv_count(values[spec.output_len], loc, spec.output_len, zero_ok=burst)
        # BurstGPT writes a failed request as 0 response tokens: nothing to replay.
        yield _Row(time, input_len, output_len, None, number, failed=output_len == 0)


def _csv_seconds(text: str, loc: str, spec: _Format) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise UsageError(f"{loc}: {spec.time} {text!r} is not a number", fix="give it in seconds")
    if value < 0:
        raise UsageError(
            f"{loc}: {spec.time} {text} is negative",
            fix=f"give {spec.time} as seconds since the trace's start (0 or more)",
        )
    return value


_DATETIME = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})[ T](\d{1,2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?"
)


def _azure_time(text: str, loc: str, spec: _Format) -> float:
    """Seconds since the epoch of `YYYY-MM-DD HH:MM:SS[.fraction][zone]` (any number of
    fraction digits: the Azure traces write seven)."""
    match = _DATETIME.fullmatch(text)
    problem = "is not a date and time like 2023-11-16 18:15:46.6805900"
    if match is not None:
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        fraction, zone = match.group(7), match.group(8)
        if (
            1 <= month <= 12
            and 1 <= day <= calendar.monthrange(year, month)[1]
            and hour < 24
            and minute < 60
            and second < 61
        ):
            whole = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
            if zone and zone != "Z":
                sign = -1 if zone[0] == "+" else 1
                digits = zone[1:].replace(":", "")
                whole += sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
            return whole + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)
        problem = "is not a valid date and time"
    raise UsageError(
        f"{loc}: {spec.time} {text!r} {problem}", fix="write it as YYYY-MM-DD HH:MM:SS.ffffff"
    )


def _csv_count(text: str, loc: str, field: str, *, zero_ok: bool) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(
            f"{loc}: {field} {text!r} is not a whole number", fix=f"give {field} in tokens"
        ) from None
    if value < 0 or (value == 0 and not zero_ok):
        raise UsageError(f"{loc}: {field} {value} must be positive", fix="at least 1 token")
    return value


_FORMATS: dict[str, _Format] = {
    "mooncake": _Format(
        "timestamp", "milliseconds", 1e-3, "input_length", "output_length", _json_rows
    ),
    "burstgpt": _Format(
        "Timestamp", "seconds", 1.0, "Request tokens", "Response tokens", _csv_rows
    ),
    "azure": _Format(
        "TIMESTAMP", "date and time", 1.0, "ContextTokens", "GeneratedTokens", _csv_rows
    ),
    "jsonl": _Format("timestamp_s", "seconds", 1.0, "input_len", "output_len", _json_rows),
}


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
