"""OpenAI tool definitions parsed from a file's text (core)."""

from __future__ import annotations

from typing import Any

from servekit import jsontext
from servekit.errors import UsageError


def parse_tools(text: str, where: str) -> tuple[dict[str, Any], ...]:
    """Parse a JSON list of tools, each `{"type": "function", "function": {"name": ...}}`.

    Raises:
        UsageError: not JSON (NaN and the infinities included), or not a non-empty list of
            named function tools.
    """
    try:
        doc = jsontext.loads_standard(text)
    except jsontext.NonStandardConstant as exc:
        raise UsageError(
            f"--tools {where} holds {exc.constant}, which is not a JSON number",
            fix="write a finite number or null there",
        ) from None
    except jsontext.LOAD_FAILURES as exc:
        raise UsageError(
            f"--tools {where}: not JSON ({jsontext.load_problem(exc)})",
            fix='write [{"type": "function", "function": {"name": "...", "parameters": {...}}}]',
        ) from None
    if not isinstance(doc, list) or not doc or not all(_is_tool(t) for t in doc):
        raise UsageError(
            f"--tools {where}: expected a non-empty JSON list of function tools",
            fix='write [{"type": "function", "function": {"name": "...", "parameters": {...}}}]',
        )
    return tuple(doc)


def _is_tool(item: object) -> bool:
    if not isinstance(item, dict) or item.get("type", "function") != "function":
        return False
    function = item.get("function")
    return isinstance(function, dict) and isinstance(function.get("name"), str)
