"""Option value types and parsers of the CLI (shell): finite floats, number lists, JSON
objects. Each names the flag and the fix when the text cannot work."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from servekit.errors import UsageError


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
    """Parse the JSON object given to `flag` (e.g. --chat-template-kwargs)."""
    example = '\'{"thinking_mode": "enabled"}\''
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{flag} is not JSON ({exc.msg})", fix=f"quote it for the shell, e.g. {example}"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object", fix=f"e.g. {example}")
    return value
