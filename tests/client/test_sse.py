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


def reference(text: str) -> list[SseEvent]:
    """The event-stream rules applied one line at a time, as the standard states them."""
    events: list[SseEvent] = []
    data: list[str] | None = None
    event, last_id = "", None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for line in lines[:-1]:  # the last one is unfinished
        if not line:
            if data is not None:
                events.append(SseEvent("\n".join(data), event or "message", last_id))
            data, event = None, ""
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data = [*(data or []), value]
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
    return events


LINES = st.lists(
    st.one_of(
        st.sampled_from(["", "data: x", "data:y", "data", "data: ", "event: e", "id: 3",
                         ": note", "retry: 9", "data: a\r", "\r", "data: {\"k\": 1}"]),
        st.text(alphabet="da:t \r\n", max_size=8),
    ),
    max_size=30,
)  # fmt: skip


@given(LINES, st.lists(st.integers(0, 400), max_size=12))
def test_events_equal_a_line_by_line_reference(lines: list[str], cuts: list[int]) -> None:
    """The whole-event fast path (one `data: ` line per event) and the line-by-line path
    give what the rules give, for any mix of lines and any split of the bytes."""
    blob = "\n".join(lines).encode()
    points = sorted({min(c, len(blob)) for c in cuts})
    chunks = [blob[a:b] for a, b in zip([0, *points], [*points, len(blob)], strict=True)]
    assert parse(chunks) == reference(blob.decode())
    parser = SseParser()
    assert [d for c in chunks for d in parser.feed_data(c)] == [e.data for e in parse(chunks)]


def test_one_data_line_events_keep_the_last_id() -> None:
    """Events on the fast path carry the id set by an earlier event, as the rules say."""
    stream = b"id: 5\ndata: a\n\ndata: b\n\ndata: c\n\n"
    assert parse([stream]) == [SseEvent("a", id="5"), SseEvent("b", id="5"), SseEvent("c", id="5")]
