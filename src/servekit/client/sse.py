"""Incremental Server-Sent Events parser (core): bytes in any split, events out.

Follows the WHATWG event-stream rules that matter for OpenAI-style streams: lines end in
CRLF, LF or CR; `data:` lines accumulate (joined by LF) until a blank line dispatches the
event; one leading space after the colon is dropped; comment lines (leading `:`) and
unknown fields are ignored; `event` and `id` are kept. Bytes may be split anywhere, also
inside a multi-byte UTF-8 character or between CR and LF: the result is the same.
Invalid UTF-8 is replaced (U+FFFD), never raised. Memory is bounded: a line, or an
event's data, longer than `MAX_LINE_CHARS` raises `SseLineTooLong` (a stream line that never
ends would otherwise grow without limit); the events completed before it ride on the error,
so the outcome is the same however the bytes are split.
"""

from __future__ import annotations

import codecs
import contextlib
from typing import NamedTuple

MAX_LINE_CHARS = 4 * 1024 * 1024
"""The longest line or event data accepted. An OpenAI-style chunk carries a token or a few
(a few hundred bytes); even a whole 128k-token answer in one chunk is about 1 MB of JSON."""


class SseEvent(NamedTuple):
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str | None = None


_Raw = tuple[str, str, str | None]
"""An event as the parser builds it: data, event type, last event id (a plain tuple is
built several times faster than the named one)."""


class SseLineTooLong(ValueError):
    """A line or an event's data exceeded the parser's limit (a protocol error).

    Attributes:
        events: the events completed before the offending line, in order.
    """

    def __init__(self, limit: int, events: list[SseEvent]) -> None:
        super().__init__(f"an event-stream line or event is longer than {limit} characters")
        self.events = events


class SseParser:
    """Feed bytes as they arrive; get back the events they complete."""

    def __init__(self, max_line_chars: int = MAX_LINE_CHARS) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._pending_cr = False
        self._data: list[str] = []
        self._data_chars = 0  # length of the pending event's data as it will be joined
        self._event = ""
        self._id: str | None = None
        self._limit = max_line_chars

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Consume bytes; return the events completed by them, in order.

        Raises:
            SseLineTooLong: a line or an event's data passed the limit; the parser holds
                nothing after it (the stream is to be abandoned).
        """
        return list(map(SseEvent._make, self._consume(self._decoder.decode(chunk))))

    def feed_data(self, chunk: bytes) -> list[str]:
        """`feed`, giving only each event's data: what an OpenAI-style stream carries, at
        a tenth of the cost per event of building an `SseEvent`.

        Raises:
            SseLineTooLong: as `feed`.
        """
        return [data for data, _, _ in self._consume(self._decoder.decode(chunk))]

    def close(self) -> list[SseEvent]:
        """Flush at end of stream. An event without its terminating blank line is dropped,
        as the standard requires; the caller sees the stream as cut."""
        with contextlib.suppress(SseLineTooLong):  # the unfinished line is dropped anyway
            self._consume(self._decoder.decode(b"", final=True))
        self._data, self._data_chars, self._event = [], 0, ""
        return []

    @property
    def has_partial(self) -> bool:
        """True when bytes of an unfinished line or event are buffered."""
        return bool(self._buffer or self._data)

    def _consume(self, text: str) -> list[_Raw]:
        # This runs for every piece of every stream. The common shape, one `data: ` line per
        # event, is taken whole: split at blank lines, and an event that is one data line
        # costs a slice. Anything else goes line by line with str.split and the `data:`
        # case first (no call per line: 2.3x faster than a regex scan with a method per
        # line). `tests/client/test_sse.py` holds both to a line-by-line reference.
        if self._pending_cr and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split across feeds
        self._pending_cr = False
        buffer = self._buffer + text if self._buffer else text
        if "\r" in buffer:
            self._pending_cr = buffer.endswith("\r")  # maybe the first half of a CRLF
            buffer = buffer.replace("\r\n", "\n").replace("\r", "\n")
        if len(buffer) + self._data_chars > self._limit:  # rare: only then count per line
            lines = buffer.split("\n")
            self._buffer = lines.pop()
            return self._consume_bounded(lines)
        events: list[_Raw] = []
        if not self._data and not self._event and "\n\n" in buffer:
            blocks = buffer.split("\n\n")
            buffer = blocks.pop()  # after the last blank line: lines of an event to come
            for block in blocks:  # each ends in a blank line, so no event is left pending
                if block.startswith("data: ") and "\n" not in block:
                    events.append((block[6:], "message", self._id))
                else:  # its lines, then the blank line that ended it
                    events += self._lines([*block.split("\n"), ""])
        lines = buffer.split("\n")
        self._buffer = lines.pop()  # the unfinished last line ("" after a line end)
        events += self._lines(lines)
        return events

    def _lines(self, lines: list[str]) -> list[_Raw]:
        """Whole lines, in order; the events they complete."""
        events: list[_Raw] = []
        data = self._data
        for line in lines:
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith(" ", 5) else line[5:])
            elif not line:
                if data:
                    events.append(("\n".join(data), self._event or "message", self._id))
                    data = []
                self._event = ""
            elif not line.startswith(":"):
                self._field(line, data)
        self._data = data
        self._data_chars = sum(map(len, data)) + len(data) - 1 if data else 0
        return events

    def _consume_bounded(self, lines: list[str]) -> list[_Raw]:
        """`_consume`'s loop one line at a time, checking every length against the limit."""
        events: list[_Raw] = []
        for line in lines:
            if len(line) > self._limit:
                self._abandon(events)
            if not line:
                if self._data:
                    events.append(("\n".join(self._data), self._event or "message", self._id))
                    self._data, self._data_chars = [], 0
                self._event = ""
            elif not line.startswith(":"):
                before = len(self._data)
                self._field(line, self._data)
                if len(self._data) > before:  # the joined length, with the LF before it
                    self._data_chars += len(self._data[-1]) + (1 if before else 0)
                    if self._data_chars > self._limit:
                        self._abandon(events)
        if len(self._buffer) > self._limit:
            self._abandon(events)
        return events

    def _abandon(self, events: list[_Raw]) -> None:
        self._buffer, self._data, self._data_chars = "", [], 0
        raise SseLineTooLong(self._limit, list(map(SseEvent._make, events)))

    def _field(self, line: str, data: list[str]) -> None:
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":  # a bare `data` line: an empty data value
            data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._id = value
