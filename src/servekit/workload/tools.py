"""OpenAI tool definitions parsed from a file's text (core)."""

from __future__ import annotations

import json
from typing import Any

from servekit import jsontext
from servekit.errors import UsageError


def parse_tools(text: str, where: str) -> tuple[dict[str, Any], ...]:
    """Parse a JSON list of tools, each `{"type": "function", "function": {"name": ...}}`.

    Raises:
        UsageError: not JSON, or not a non-empty list of named function tools.
    """
    try:
        doc = json.loads(text)
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
