"""Line-by-line reading of a large text held in memory (core): numbered lines split at line
feeds only, and the objects of a JSON-lines text, with errors that name the line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from servekit import jsontext
from servekit.errors import UsageError


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
