"""Incremental Server-Sent Events parser (core): bytes in any split, events out.

Follows the WHATWG event-stream rules that matter for OpenAI-style streams: lines end in
CRLF, LF or CR; `data:` lines accumulate (joined by LF) until a blank line dispatches the
event; one leading space after the colon is dropped; comment lines (leading `:`) and
unknown fields are ignored; `event` and `id` are kept. Bytes may be split anywhere, also
inside a multi-byte UTF-8 character or between CR and LF: the result is the same.
Invalid UTF-8 is replaced (U+FFFD), never raised.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str | None = None


class SseParser:
    """Feed bytes as they arrive; get back the events they complete."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._pending_cr = False
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Consume bytes; return the events completed by them, in order."""
        text = self._decoder.decode(chunk)
        return self._consume(text)

    def close(self) -> list[SseEvent]:
        """Flush at end of stream. An event without its terminating blank line is dropped,
        as the standard requires; the caller sees the stream as cut."""
        self._consume(self._decoder.decode(b"", final=True))
        self._data, self._event = [], ""
        return []

    @property
    def has_partial(self) -> bool:
        """True when bytes of an unfinished line or event are buffered."""
        return bool(self._buffer or self._data)

    def _consume(self, text: str) -> list[SseEvent]:
        events: list[SseEvent] = []
        if self._pending_cr and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split across feeds
        self._pending_cr = False
        buffer = self._buffer + text
        pos = 0
        for match in _EOL.finditer(buffer):
            self._line(buffer[pos : match.start()], events)
            pos = match.end()
        if pos and buffer[pos - 1] == "\r" and pos == len(buffer):
            self._pending_cr = True  # a CR at the end may be the first half of CRLF
        self._buffer = buffer[pos:]
        return events

    def _line(self, line: str, events: list[SseEvent]) -> None:
        if not line:
            if self._data:
                events.append(SseEvent("\n".join(self._data), self._event or "message", self._id))
            self._data, self._event = [], ""
            return
        if line.startswith(":"):
            return
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._id = value
