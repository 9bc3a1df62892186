"""Tests of the incremental SSE parser."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servekit.client.sse import SseEvent, SseParser

STREAM = (
    'data: {"a": 1}\n\n'
    ": keep-alive comment\n"
    'data: {"text": "h\u00e9llo \u4e16\u754c \U0001f600"}\r\n\r\n'
    "event: update\rdata: line one\rdata:line two\r\r"
    "id: 7\ndata: [DONE]\n\n"
).encode()
EXPECTED = [
    SseEvent('{"a": 1}'),
    SseEvent('{"text": "h\u00e9llo \u4e16\u754c \U0001f600"}'),
    SseEvent("line one\nline two", event="update"),
    SseEvent("[DONE]", id="7"),
]


def parse(chunks: list[bytes]) -> list[SseEvent]:
    parser = SseParser()
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    parser.close()
    return events


def test_whole_stream() -> None:
    """LF, CRLF and CR line ends, comments, multi-line data, event and id fields."""
    assert parse([STREAM]) == EXPECTED


@given(st.lists(st.integers(0, len(STREAM)), max_size=30))
def test_any_byte_split_gives_the_same_events(cuts: list[int]) -> None:
    """However the bytes are split (inside UTF-8 characters or CRLF too), events are equal."""
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    assert parse(chunks) == EXPECTED


def test_byte_at_a_time() -> None:
    """One byte per feed still yields the same events."""
    assert parse([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_unterminated_event_is_not_dispatched() -> None:
    """An event cut before its blank line is not emitted, and the parser says data is pending."""
    parser = SseParser()
    assert parser.feed(b'data: {"a": 1}\n\ndata: {"b"') == [SseEvent('{"a": 1}')]
    assert parser.has_partial
    assert parser.close() == []


@given(st.binary(max_size=300))
def test_garbage_never_raises(blob: bytes) -> None:
    """Arbitrary bytes never raise; invalid UTF-8 becomes U+FFFD."""
    parser = SseParser()
    parser.feed(blob)
    parser.close()
