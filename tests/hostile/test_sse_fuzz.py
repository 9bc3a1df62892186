"""Fuzz and property tests of the event-stream parser and the stream reader (in-process).

Whatever bytes a server sends, split however the network splits them, the parser gives the
same events or the same one classified error (`SseLineTooLong`), holding at most its limit;
and the reader turns any chunk data into a result without raising, with usage it believes
only when it is consistent with what streamed.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servekit.client.sse import MAX_LINE_CHARS, SseEvent, SseLineTooLong, SseParser
from servekit.client.stream import StreamReader

LIMIT = 48  # small, so the fuzzer reaches it often
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = {None, "malformed_chunk", "stream_cut", "empty_output", "server_error", "invalid_usage"}

# SSE-shaped pieces mixed with arbitrary bytes: the fuzzer builds streams that parse and
# streams that do not, with every line ending and the odd over-long line.
PIECES = st.one_of(
    st.sampled_from([b"data: ", b"data:", b"event: x", b"id: 1", b": c", b"\n", b"\r", b"\r\n"]),
    st.binary(max_size=20),
    st.integers(LIMIT - 2, LIMIT + 8).map(lambda n: b"data: " + b"y" * n),
    st.text(max_size=8).map(lambda t: t.encode()),
)
STREAMS = st.lists(PIECES, max_size=25).map(b"".join)


def outcome(pieces: list[bytes]) -> tuple[list[SseEvent], bool]:
    """The events a parser gives for these pieces, and whether it raised the line error."""
    parser = SseParser(max_line_chars=LIMIT)
    events: list[SseEvent] = []
    for piece in pieces:
        try:
            events += parser.feed(piece)
        except SseLineTooLong as exc:
            return events + exc.events, True
    parser.close()
    return events, False


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given offsets."""
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@FUZZ
@given(STREAMS, st.lists(st.integers(0, 600), max_size=40))
def test_any_split_gives_the_same_events_or_error(data: bytes, cuts: list[int]) -> None:
    """However the bytes are split, the same events come out, and the same error (or none)."""
    assert outcome(split(data, cuts)) == outcome([data])


@FUZZ
@given(STREAMS, st.lists(st.integers(0, 600), max_size=40))
def test_no_event_is_longer_than_the_limit(data: bytes, cuts: list[int]) -> None:
    """Every event delivered fits in the limit; the error is raised exactly when some line
    or event is longer (checked against a simple reference over the whole text)."""
    events, failed = outcome(split(data, cuts))
    assert all(len(e.data) <= LIMIT for e in events)
    text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    if any(len(line) > LIMIT for line in text.split("\n")):
        assert failed


def _feed_endless(parser: SseParser, offered: int) -> int:
    """Feed `data: ` and then `offered` bytes of one line; the bytes fed until the parser
    refused (or all of them)."""
    piece = b"x" * 65536
    parser.feed(b"data: ")
    fed = 0
    try:
        while fed < offered:
            parser.feed(piece)
            fed += len(piece)
    except SseLineTooLong:
        return fed
    return fed


def test_endless_line_is_cut_in_bounded_memory() -> None:
    """A line that never ends (64 MB offered) raises once the default limit is passed, and
    the parser never holds much more than that limit."""
    tracemalloc.start()
    try:
        fed = _feed_endless(SseParser(), 64 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert fed <= MAX_LINE_CHARS
    assert peak < 4 * MAX_LINE_CHARS  # the buffer, and one joined copy of it


def test_ten_megabyte_line_is_refused() -> None:
    """A complete 10 MB data line is a protocol error, not an event; earlier events survive."""
    parser = SseParser()
    with pytest.raises(SseLineTooLong) as caught:
        parser.feed(b"data: first\n\ndata: " + b"y" * (10 * 1024 * 1024) + b"\n\n")
    assert caught.value.events == [SseEvent("first")]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
COUNT = st.one_of(st.none(), st.booleans(), st.integers(-5, 40), st.just(10**15), st.floats(0, 9))
CHUNK = st.fixed_dictionaries(
    {"choices": st.one_of(
        st.just([{"index": 0, "delta": {"content": "w"}, "finish_reason": None}]),
        st.just([]),
        JSON,
    ),
     "usage": st.one_of(st.none(), st.fixed_dictionaries(
         {"prompt_tokens": COUNT, "completion_tokens": COUNT}))}
)  # fmt: skip
DATA = st.one_of(CHUNK.map(json.dumps), JSON.map(json.dumps), st.text(max_size=12),
                 st.just("[DONE]"))  # fmt: skip


@FUZZ
@given(st.lists(DATA, max_size=12), st.booleans())
def test_reader_never_raises_and_believes_only_consistent_usage(
    events: list[str], cut: bool
) -> None:
    """Any chunk data gives a result; a successful one has usage between the chunks that
    carried tokens and max_tokens, and per-chunk tokens that add up to it."""
    max_tokens = 16
    reader = StreamReader(max_tokens=max_tokens)
    for index, data in enumerate(events):
        reader.feed(data, index)
    result = reader.finish(cut=cut)
    assert result.error_kind in KINDS
    assert len(result.chunk_tokens) == len(result.chunk_ns)
    assert all(t >= 0 for t in result.chunk_tokens)
    if result.error_kind is None:
        completion = result.completion_tokens
        if completion is not None:
            assert completion <= max_tokens
            assert sum(result.chunk_tokens) == completion
        assert result.prompt_tokens is None or result.prompt_tokens >= 0


def _stream(usages: list[Any], *, max_tokens: int | None = 8) -> tuple[str | None, int]:
    """Feed one content chunk per usage value (then [DONE]); the error class and the
    tokens counted."""
    reader = StreamReader(max_tokens=max_tokens)
    for i, completion in enumerate(usages):
        usage = {"prompt_tokens": 5, "completion_tokens": completion}
        chunk = {"choices": [{"index": 0, "delta": {"content": "w"}}], "usage": usage}
        reader.feed(json.dumps(chunk), i)
    reader.feed("[DONE]", len(usages))
    result = reader.finish()
    return result.error_kind, sum(result.chunk_tokens)


@pytest.mark.parametrize(
    ("usages", "kind"),
    [
        ([1, 2, 3], None),  # vLLM's continuous usage
        ([None, None, 3], None),  # usage once at the end
        ([1, 2, -8], "invalid_usage"),
        ([True, True, True], "invalid_usage"),
        ([1, 2, 10**15], "invalid_usage"),  # MemoryError before: one ITL value per token
        ([1, 2, 3.0], "invalid_usage"),
        ([3, 2, 1], "invalid_usage"),  # falls from chunk to chunk
        ([None, None, 2], "invalid_usage"),  # fewer tokens than chunks that carried them
        ([1, 2, 9], "invalid_usage"),  # more than max_tokens 8
    ],
)
def test_usage_is_checked(usages: list[Any], kind: str | None) -> None:
    """Negative, boolean, non-integer, falling, huge or contradictory usage is invalid_usage,
    and its tokens are not believed (one per chunk instead)."""
    got, tokens = _stream(usages)
    assert got == kind
    assert tokens == 3


def test_data_after_done_is_malformed() -> None:
    """A chunk after [DONE] is malformed_chunk; a repeated [DONE] alone is harmless."""
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "w"}}]})
    again = StreamReader()
    for data in (chunk, "[DONE]", "[DONE]"):
        again.feed(data, 0)
    assert again.finish().error_kind is None
    late = StreamReader()
    for data in (chunk, "[DONE]", chunk):
        late.feed(data, 0)
    assert late.finish().error_kind == "malformed_chunk"


def test_tool_argument_chunk_without_a_token_is_believed() -> None:
    """A tool-call parser's last chunk (held-back arguments, no new token) does not make a
    one-token count contradictory."""
    reader = StreamReader(max_tokens=8)
    call = {"index": 0, "function": {"name": "f", "arguments": "{}"}}
    for delta in ({"content": "w"}, {"tool_calls": [call]}):
        chunk = {"choices": [{"index": 0, "delta": delta}], "usage": {"completion_tokens": 1}}
        reader.feed(json.dumps(chunk), 0)
    reader.feed("[DONE]", 0)
    result = reader.finish()
    assert result.error_kind is None
    assert sum(result.chunk_tokens) == 1
