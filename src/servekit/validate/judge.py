"""Judge model outputs (core): garbage, leaked markers, tool-call arguments, divergence.

Pure functions over text, so they are tested exhaustively and reused by every check.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

# Markers that must never reach `content`: MiniMax-M3's thinking and tool-call namespace
# (docs/engine-facts.md section 5) and the common `<think>` / `<tool_call>` tags of other parsers.
REASONING_MARKERS = ("<mm:think>", "</mm:think>", "<think>", "</think>")
TOOL_MARKERS = ("]<]minimax[>[", "<tool_call>", "</tool_call>")
REPLACEMENT_RUN = "\ufffd\ufffd"
MIN_WORDS_FOR_REPETITION = 12
MAX_TOP_WORD_SHARE = 0.6
MAX_PERIOD = 4


def leaked_markers(text: str, markers: Sequence[str]) -> list[str]:
    """The markers that appear in `text`, in the order given."""
    return [m for m in markers if m in text]


def garbage_reason(text: str) -> str | None:
    """Why an output is garbage, or None when it looks like text.

    Garbage: empty; NUL bytes; a run of two or more U+FFFD replacement characters (bytes
    that were not UTF-8); or collapsed repetition - among 12 or more words, one word making
    over 60% of them, or the second half repeating a cycle of at most 4 words.
    """
    if not text.strip():
        return "empty output"
    if "\x00" in text:
        return f"{text.count(chr(0))} NUL byte(s)"
    if REPLACEMENT_RUN in text:
        return "a run of U+FFFD (bytes that are not UTF-8)"
    words = text.split()
    if len(words) >= MIN_WORDS_FOR_REPETITION:
        word, count = Counter(words).most_common(1)[0]
        if count / len(words) > MAX_TOP_WORD_SHARE:
            return f"collapsed repetition ({word!r} is {count} of {len(words)} words)"
        tail = words[len(words) // 2 :]
        for period in range(1, MAX_PERIOD + 1):
            if all(tail[i] == tail[i % period] for i in range(len(tail))):
                cycle = " ".join(tail[:period])
                return f"collapsed repetition (ends repeating {cycle!r})"
    return None


@dataclass(frozen=True, slots=True)
class ToolCallVerdict:
    """Whether one tool call is valid, and why not."""

    ok: bool
    detail: str
    arguments: Any = None


def judge_tool_call(name: str, arguments: str, tools: Sequence[dict[str, Any]]) -> ToolCallVerdict:
    """A tool call is valid when its name is one of `tools` and its arguments are JSON that
    satisfies that tool's JSON schema (`function.parameters`)."""
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    if name not in by_name:
        return ToolCallVerdict(False, f"called {name!r}, which is not among {sorted(by_name)}")
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCallVerdict(
            False, f"arguments of {name} are not JSON ({exc.msg}): {arguments[:80]!r}"
        )
    except (ValueError, RecursionError):  # a 5000-digit number, nesting past the limit
        return ToolCallVerdict(False, f"arguments of {name} are JSON no parser should take: "
                               f"{arguments[:80]!r}")  # fmt: skip
    schema = by_name[name].get("parameters") or {"type": "object"}
    try:
        jsonschema.validate(parsed, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        return ToolCallVerdict(
            False, f"arguments of {name} break its schema at {where}: {exc.message}"
        )
    return ToolCallVerdict(True, f"{name}({json.dumps(parsed, sort_keys=True)})", parsed)


def first_difference(a: str, b: str) -> str:
    """Where two outputs first differ, shown briefly (for divergence reports)."""
    index = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return f"differ at character {index}: {a[index : index + 24]!r} vs {b[index : index + 24]!r}"
