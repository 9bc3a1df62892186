"""The CSV trace parser (core): BurstGPT's and Azure's traces.

A header naming the columns, then one row per request: BurstGPT's times in seconds since
the trace's start (a failed request has 0 response tokens and is skipped), Azure's as
dates and times.
"""

from __future__ import annotations

import calendar
import csv
import math
import re
from collections.abc import Iterator

from servekit.errors import UsageError
from servekit.workload.textlines import numbered_lines
from servekit.workload.trace_format import Row, TraceFormat, example


def csv_rows(text: str, where: str, spec: TraceFormat, block_tokens: int) -> Iterator[Row]:
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
                fix=example(spec.name),
            )
        columns[field] = names.index(field)
    burst = spec is BURSTGPT
    for cells in reader:
        if not any(cell.strip() for cell in cells):
            continue
        number = reader.line_num
        loc = f"{where}:{number}"
        values = {}
        for field, index in columns.items():
            if index >= len(cells) or not cells[index].strip():
                raise UsageError(f"{loc}: {field} is missing", fix=example(spec.name))
            values[field] = cells[index].strip()
        time = (
            _csv_seconds(values[spec.time], loc, spec)
            if burst
            else _azure_time(values[spec.time], loc, spec)
        )
        input_len = _csv_count(values[spec.input_len], loc, spec.input_len, zero_ok=False)
        output_len = _csv_count(values[spec.output_len], loc, spec.output_len, zero_ok=burst)
        # BurstGPT writes a failed request as 0 response tokens: nothing to replay.
        yield Row(time, input_len, output_len, None, number, failed=output_len == 0)


def _csv_seconds(text: str, loc: str, spec: TraceFormat) -> float:
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


def _azure_time(text: str, loc: str, spec: TraceFormat) -> float:
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


BURSTGPT = TraceFormat(
    "burstgpt", "Timestamp", "seconds", 1.0, "Request tokens", "Response tokens", csv_rows
)
AZURE = TraceFormat(
    "azure", "TIMESTAMP", "date and time", 1.0, "ContextTokens", "GeneratedTokens", csv_rows
)
