"""The JSON-lines trace parser (core): Mooncake's traces and servekit's own `jsonl` format.

One JSON object per line, times in milliseconds (Mooncake, whose lines also carry one
`hash_ids` entry per block of prompt tokens) or seconds (`jsonl`, hash ids optional).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from servekit.errors import UsageError
from servekit.workload.textlines import json_object_lines
from servekit.workload.trace_format import Row, TraceFormat, counted, example, shown


def json_rows(text: str, where: str, spec: TraceFormat, block_tokens: int) -> Iterator[Row]:
    needs_hashes = spec is MOONCAKE
    fix = example(spec.name)
    for number, loc, obj in json_object_lines(text, where, fix=fix):
        time = _json_time(obj.get(spec.time), loc, spec)
        input_len = _json_count(obj.get(spec.input_len), loc, spec.input_len)
        output_len = _json_count(obj.get(spec.output_len), loc, spec.output_len)
        raw_ids = obj.get("hash_ids")
        if raw_ids is None and needs_hashes:
            raise UsageError(f"{loc}: hash_ids is missing", fix=example("mooncake"))
        ids = None if raw_ids is None else _hash_ids(raw_ids, loc, spec, input_len, block_tokens)
        yield Row(time, input_len, output_len, ids, number)


def _json_time(value: object, loc: str, spec: TraceFormat) -> float:
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
            f"{loc}: {spec.time} {shown(value)} is negative",
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
    value: object, loc: str, spec: TraceFormat, input_len: int, block_tokens: int
) -> tuple[int, ...]:
    if type(value) is not list or not all(type(v) is int for v in value):  # no bools
        raise UsageError(f"{loc}: hash_ids must be a list of integers", fix="e.g. [0, 1, 2]")
    blocks = -(-input_len // block_tokens)
    if len(value) != blocks:
        raise UsageError(
            f"{loc}: hash_ids holds {counted(len(value), 'id')} but {spec.input_len} "
            f"{input_len} is {counted(blocks, 'block')} of {block_tokens} tokens",
            fix="one id per block (the last may be partial); --trace-block-tokens sets the "
            "block size",
        )
    return tuple(value)


MOONCAKE = TraceFormat(
    "mooncake", "timestamp", "milliseconds", 1e-3, "input_length", "output_length", json_rows
)
JSONL = TraceFormat("jsonl", "timestamp_s", "seconds", 1.0, "input_len", "output_len", json_rows)
