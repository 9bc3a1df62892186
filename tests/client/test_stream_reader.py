"""Unit tests of the stream reader's token accounting and robustness (no network)."""

from __future__ import annotations

import json
from typing import Any

from servekit.client.stream import StreamReader


def event(delta: dict[str, Any] | None = None, usage: int | None = None, **extra: Any) -> str:
    body: dict[str, Any] = {"choices": [{"index": 0, "delta": delta or {}}], **extra}
    if usage is not None:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": usage}
    return json.dumps(body)


def test_usage_only_on_the_last_chunk_is_spread() -> None:
    """A server that reports usage once (on its last content chunk) gets the count spread."""
    reader = StreamReader()
    for i in range(7):
        reader.feed(event({"content": "x"}), i * 10)
    reader.feed(event({"content": "y"}, usage=8), 70)
    reader.feed("[DONE]", 71)
    result = reader.finish()
    assert result.chunk_tokens == [1] * 8
    assert result.error_kind is None


def test_continuous_usage_with_final_usage_only_chunk() -> None:
    """Per-chunk usage gives increases; a final usage-only count tops up the last chunk."""
    reader = StreamReader()
    reader.feed(event({"reasoning": "r"}, usage=2), 0)
    reader.feed(event({"content": "a"}, usage=5), 10)
    reader.feed(json.dumps({"choices": [], "usage": {"completion_tokens": 6}}), 11)
    reader.feed("[DONE]", 12)
    result = reader.finish()
    assert result.chunk_tokens == [2, 4]
    assert result.reasoning_tokens == 2


def test_malformed_chunks_never_raise() -> None:
    """Wrong types, huge integers and deep nesting are classified, not raised."""
    for data in (
        event({"tool_calls": 1}),
        '{"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": '
        + "9" * 5000
        + "}}",
        "[" * 100_000 + "]" * 100_000,
        event({"content": 5}),
    ):
        reader = StreamReader()
        reader.feed(data, 0)
        reader.feed("[DONE]", 1)
        result = reader.finish()
        assert result.error_kind in {"malformed_chunk", "empty_output"}
