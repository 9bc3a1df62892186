"""Chat requests as the live simulator reads them (core): messages, tools, the rendered
prompt, whether a request thinks, and which tool it calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servekit.errors import SimulationError

_GENERIC_VERBS = frozenset({"get", "set", "fetch", "list", "run", "call", "make", "create", "do"})


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message, reduced to what the prompt renders."""

    role: str
    content: str = ""
    tool_calls: str = ""  # JSON of the assistant's tool calls, if any


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the client offers the model."""

    name: str
    parameters: Mapping[str, object]
    description: str = ""


def render_chat(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> str:
    """Render chat messages as a role-tagged prompt; its token count is the prompt length."""
    parts = []
    if tools:
        spec = [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in tools
        ]
        parts.append(f"<|tools|>\n{json.dumps(spec, sort_keys=True)}\n")
    for message in messages:
        body = message.content
        if message.tool_calls:
            body = f"{body}\n{message.tool_calls}" if body else message.tool_calls
        parts.append(f"<|{message.role}|>\n{body}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def thinking_enabled(
    reasoning_parser: str | None,
    defaults: Mapping[str, object] | None,
    request_kwargs: Mapping[str, object] | None,
) -> bool:
    """Whether a request thinks: the request's `thinking_mode` wins over the server default."""
    if not reasoning_parser:
        return False
    merged = {**(defaults or {}), **(request_kwargs or {})}
    return merged.get("thinking_mode") == "enabled"


def choose_tool(
    tools: Sequence[ToolSpec], tool_choice: str | None, messages: Sequence[Message]
) -> ToolSpec | None:
    """Pick the tool to call, or None for a text answer.

    A named choice calls that tool; "auto" and "required" call the tool whose name shares the
    most words with the last user message (get_weather for "weather in Paris?"), else the
    first. "none", no tools, or (except for "required") a tool result after the last user
    message (the follow-up turn) give a text answer.

    Raises:
        SimulationError: a named tool is not among `tools`.
    """
    if not tools or tool_choice == "none":
        return None
    if tool_choice not in (None, "auto", "required"):
        for tool in tools:
            if tool.name == tool_choice:
                return tool
        names = ", ".join(t.name for t in tools)
        raise SimulationError(
            f"tool_choice names {tool_choice!r}, which is not among the tools ({names})",
            fix="name one of the request's tools, or use auto, required or none",
        )
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if tool_choice != "required" and any(m.role == "tool" for m in messages[last_user + 1 :]):
        return None
    words = (
        set(re.findall(r"[a-z0-9]+", messages[last_user].content.lower()))
        if last_user >= 0
        else set()
    )

    def hits(tool: ToolSpec) -> int:
        return len(set(re.findall(r"[a-z0-9]+", tool.name.lower())) - _GENERIC_VERBS & words)

    return max(tools, key=hits)  # the first of the best-matching tools
