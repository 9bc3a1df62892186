"""What every trace format parser shares (core): the parsed row, how a format spells its
fields and time unit, and the example line an error's fix shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple


class Row(NamedTuple):
    """One parsed row: its time in the file's unit (`TraceFormat.seconds_per_unit`), lengths,
    hash ids (a tuple: cheap, as a trace may hold millions)."""

    time: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None
    line: int
    failed: bool = False


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """How one format spells its fields and its time unit."""

    name: str  # as `traces.TRACE_FORMATS` names it
    time: str
    time_unit: str  # as errors and docs say it
    seconds_per_unit: float
    input_len: str
    output_len: str
    rows: Callable[[str, str, TraceFormat, int], Iterator[Row]]


def counted(number: int, noun: str) -> str:
    """`number` `noun`s, in the singular for one."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def shown(value: float) -> str:
    """A number as the file writes it: whole numbers without a fraction."""
    return str(int(value)) if value == int(value) else f"{value:g}"


def example(fmt: str) -> str:
    """How to write a file of format `fmt` (an error's fix)."""
    return {
        "mooncake": 'write lines like {"timestamp": 0, "input_length": 600, '
        '"output_length": 40, "hash_ids": [0, 1]}',
        "burstgpt": "write a header 'Timestamp,Model,Request tokens,Response tokens,"
        "Total tokens,Log Type' and one row per request",
        "azure": "write a header 'TIMESTAMP,ContextTokens,GeneratedTokens' and one row per request",
        "jsonl": 'write lines like {"timestamp_s": 0.0, "input_len": 600, "output_len": 40}',
    }[fmt]
