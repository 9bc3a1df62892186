"""The stream reader's `prompt_tokens_details.cached_tokens`, and its way into the record."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servekit.bench.requests import to_record
from servekit.client.http import TimedStream
from servekit.client.stream import StreamReader, StreamResult


def _stream(usage: dict[str, Any]) -> StreamResult:
    reader = StreamReader(max_tokens=8)
    reader.feed(json.dumps({"choices": [{"index": 0, "delta": {"content": "a"}}]}), 10)
    reader.feed(json.dumps({"choices": [], "usage": usage}), 20)
    reader.feed("[DONE]", 21)
    return reader.finish()


def test_cached_tokens_are_read_from_the_final_usage() -> None:
    """vLLM's usage with prompt_tokens_details gives the cached count exactly."""
    result = _stream(
        {"prompt_tokens": 600, "completion_tokens": 1,
         "prompt_tokens_details": {"cached_tokens": 512}}
    )  # fmt: skip
    assert result.error_kind is None
    assert (result.prompt_tokens, result.cached_tokens) == (600, 512)


def test_no_details_or_null_details_mean_unknown() -> None:
    """A server that does not send the details (or sends null) leaves cached_tokens None."""
    for usage in (
        {"prompt_tokens": 6, "completion_tokens": 1},
        {"prompt_tokens": 6, "completion_tokens": 1, "prompt_tokens_details": None},
        {"prompt_tokens": 6, "completion_tokens": 1, "prompt_tokens_details": {}},
    ):
        result = _stream(usage)
        assert result.error_kind is None
        assert result.cached_tokens is None


def test_zero_cached_tokens_is_a_count() -> None:
    """0 cached tokens is a reported count (a cold prompt), not unknown."""
    result = _stream(
        {"prompt_tokens": 6, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}
    )
    assert result.cached_tokens == 0


@pytest.mark.parametrize(
    ("details", "message"),
    [
        ({"cached_tokens": -1}, "usage cached_tokens is -1: not a token count"),
        ({"cached_tokens": True}, "usage cached_tokens is True: not a token count"),
        ({"cached_tokens": 2.0}, "usage cached_tokens is 2.0: not a token count"),
        ({"cached_tokens": "4"}, "usage cached_tokens is '4': not a token count"),
        ({"cached_tokens": 7}, "usage cached_tokens is 7, over the 6 allowed"),
        ([1, 2], "usage prompt_tokens_details is not an object"),
    ],
)
def test_implausible_cached_tokens_are_invalid_usage(details: object, message: str) -> None:
    """A cached count that is no count, or is above prompt_tokens, fails the request."""
    result = _stream({"prompt_tokens": 6, "completion_tokens": 1, "prompt_tokens_details": details})
    assert result.error_kind == "invalid_usage"
    assert result.error == message
    assert result.cached_tokens is None


def test_to_record_copies_cached_tokens() -> None:
    """The runner's record carries the stream's cached count (None stays None)."""
    result = _stream(
        {"prompt_tokens": 6, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 4}}
    )
    record = to_record("r1", "c=1", 0, TimedStream(5, 30, 200, result))
    assert (record.prompt_tokens, record.cached_tokens) == (6, 4)
    plain = to_record("r2", "c=1", 0, TimedStream(5, 30, 200, _stream({"prompt_tokens": 6})))
    assert plain.cached_tokens is None
