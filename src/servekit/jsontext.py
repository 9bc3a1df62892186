"""Strict JSON text for every document servekit writes (core): never NaN or Infinity.

Python's `json.dumps` writes `float("nan")` as a bare `NaN`, which no JSON parser but
Python's accepts, so one NaN that slipped in would make a whole summary.json unreadable.
Every writer (summary.json, records.jsonl, validate.json, transcripts, `--json` output,
rendered flags) goes through `dumps`, which refuses such a value and names where it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servekit.errors import ServekitError

__all__ = [
    "NonFiniteNumber",
    "NonStandardConstant",
    "dumps",
    "finite_or_null",
    "loads_standard",
    "non_finite_path",
]


class NonFiniteNumber(ServekitError):
    """A document about to be written holds NaN or an infinity (a servekit defect)."""


def dumps(
    document: object,
    *,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
    default: Callable[[Any], Any] | None = None,
    what: str = "a document",
) -> str:
    """`document` as JSON text; the keyword arguments are `json.dumps`'s, `what` names the
    document in the error.

    Raises:
        NonFiniteNumber: a float in `document` is NaN or infinite (JSON has no such number).
    """
    try:
        return json.dumps(
            document,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
            ensure_ascii=ensure_ascii,
            default=default,
            allow_nan=False,
        )
    except ValueError:
        where = non_finite_path(document)
        if where is None:  # not a NaN: some other value json cannot write
            raise
        raise NonFiniteNumber(
            f"{what} holds a non-finite number at {where}; it was not written",
            fix="report this as a servekit bug with the command that was run",
        ) from None


def non_finite_path(document: object, path: str = "$") -> str | None:
    """Where the first NaN or infinity in a JSON-like value is (`$.points[0].rate_rps`)."""
    if isinstance(document, float):
        return None if math.isfinite(document) else path
    if isinstance(document, Mapping):
        for key, value in document.items():
            if (found := non_finite_path(value, f"{path}.{key}")) is not None:
                return found
    elif isinstance(document, Sequence) and not isinstance(document, str | bytes):
        for index, value in enumerate(document):
            if (found := non_finite_path(value, f"{path}[{index}]")) is not None:
                return found
    return None


def finite_or_null(document: object) -> object:
    """A copy of a JSON-like value with every NaN or infinity replaced by None (`null`).

    For text servekit records as it was received (a server's replies in transcripts.jsonl):
    Python's parser accepts `NaN`, and the record must stay JSON.
    """
    if isinstance(document, float):
        return document if math.isfinite(document) else None
    if isinstance(document, Mapping):
        return {key: finite_or_null(value) for key, value in document.items()}
    if isinstance(document, list | tuple):
        return [finite_or_null(value) for value in document]
    return document


class NonStandardConstant(ValueError):
    """JSON text holds `NaN`, `Infinity` or `-Infinity`, which Python's parser takes but
    JSON has no number for (`constant` is the one met first)."""

    def __init__(self, constant: str) -> None:
        super().__init__(f"{constant} is not a JSON number")
        self.constant = constant


def loads_standard(text: str | bytes) -> Any:
    """`json.loads`, refusing the non-standard constants Python's parser accepts.

    For JSON a user hands servekit (an option's value, a tools file): a NaN there would be
    sent to a server or written into a result, where no other parser reads it.

    Raises:
        NonStandardConstant: the text holds NaN, Infinity or -Infinity.
        ValueError, RecursionError: anything `json.loads` refuses (`LOAD_FAILURES`).
    """

    def refuse(constant: str) -> Any:
        raise NonStandardConstant(constant)

    return json.loads(text, parse_constant=refuse)


LOAD_FAILURES = (ValueError, RecursionError)
"""What `json.loads` raises on text it cannot take: bad syntax or bytes (JSONDecodeError and
UnicodeDecodeError are ValueErrors), a number past the int conversion limit, nesting past
the recursion limit."""


def load_problem(exc: ValueError | RecursionError) -> str:
    """What is wrong with JSON text that `json.loads` refused, in a few words."""
    if isinstance(exc, NonStandardConstant):
        return f"holds {exc.constant}, which is not a JSON number"
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return "a number too long to read"
