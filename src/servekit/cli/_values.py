"""Option value types and parsers of the CLI (shell): finite floats, number lists, JSON
objects, the text of an input file. Each names the flag and the fix when it cannot work."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from servekit import jsontext
from servekit.bench.files import open_regular
from servekit.errors import ServekitError, UsageError


class FiniteFloat(click.FloatRange):
    """A float option that refuses NaN and infinity (exit 2), optionally within a range.

    Every float option of every command uses it: `float("nan")` passes click's range checks
    (every comparison with NaN is false) and would reach summary.json as a bare `NaN`.
    """

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


def parse_numbers(
    text: str | None, kind: type[int] | type[float], flag: str, *, allow_inf: bool = False
) -> list[float]:
    """Parse a comma-separated list of positive finite numbers given to `flag`.

    With `allow_inf`, `inf` is accepted too (`--rate inf`: send every request at once).
    """
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(
            f"{flag} {text!r} is not a comma-separated list of numbers",
            fix=f"e.g. {flag} 1,4,16",
        ) from None
    infinite_ok = allow_inf and kind is float
    if not values or any(
        math.isnan(v) or v <= 0 or (math.isinf(v) and not infinite_ok) for v in values
    ):
        raise UsageError(
            f"{flag} {text!r} needs positive finite numbers"
            + (" (or inf: all at once)" if infinite_ok else ""),
            fix=f"e.g. {flag} 1,4,16" + (",inf" if infinite_ok else ""),
        )
    return values


def parse_json_object(text: str, flag: str) -> dict[str, Any]:
    """Parse the JSON object given to `flag` (e.g. --chat-template-kwargs); NaN and the
    infinities (which Python's parser takes) are refused like any text that is not JSON."""
    example = '\'{"thinking_mode": "enabled"}\''
    try:
        value = jsontext.loads_standard(text)
    except jsontext.NonStandardConstant as exc:
        raise UsageError(
            f"{flag} {_quoted(text)} holds {exc.constant}, which is not a JSON number",
            fix="write a finite number or null there",
        ) from None
    except jsontext.LOAD_FAILURES as exc:
        raise UsageError(
            f"{flag} is not JSON ({jsontext.load_problem(exc)})",
            fix=f"quote it for the shell, e.g. {example}",
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object", fix=f"e.g. {example}")
    return value


def _quoted(text: str, limit: int = 80) -> str:
    """An option's text quoted for an error line, cut short past `limit` characters."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


MAX_INPUT_BYTES = {
    "--dataset": 4 * 2**30,
    "--tools": 16 * 2**20,
    "--trace": 4 * 2**30,
    "--conversations": 4 * 2**30,
    "--space": 1 << 20,  # a space file is a few hundred bytes; YAML limits apply too
}
"""The largest file each flag reads (ShareGPT's JSON is about 0.7 GB, a month of a public
trace a few hundred MB; a tools file a few kB)."""


def read_text_option(path: Path, flag: str) -> str:
    """A regular UTF-8 text file given to `flag` (a FIFO, a device, a binary or compressed
    file, or one past `MAX_INPUT_BYTES` is a usage error)."""
    fix = f"pass {flag} a regular UTF-8 text file"
    try:
        with open_regular(path, fix=fix, max_bytes=MAX_INPUT_BYTES[flag]) as file:
            raw = file.read()
    except ServekitError as exc:
        raise UsageError(f"{flag}: {exc.message}", fix=exc.fix or fix) from None
    except OSError as exc:
        raise UsageError(
            f"cannot read {flag} {str(path)!r}: {exc.strerror or exc}", fix=fix
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{flag} {str(path)!r} is not UTF-8 text (byte {exc.start}): binary or compressed?",
            fix=f"pass {flag} a UTF-8 text file (decompress a .gz first)",
        ) from None
