"""An in-process fake `Transport` for tests (shell): a handler function plays the server.

No socket and no subprocess: `MockTransport(handler)` calls `await handler(request)` for
each request and hands its `MockResponse` back to the client as if it had come from the
network. A handler plays a failure by raising (`ConnectFailed` for a refused connection),
by never returning (a hang: the client's own deadline must fire), or with a body whose
pieces stop early, raise `Disconnected` (a cut stream) or wait forever (a stall).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from servekit.client.transport import Response


@dataclass(frozen=True, slots=True)
class MockRequest:
    """One request as the fake server sees it."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None

    @property
    def path(self) -> str:
        """The URL's path (`/v1/completions`)."""
        return urlsplit(self.url).path

    def json(self) -> Any:
        """The body parsed as JSON (None without a body)."""
        return None if self.body is None else json.loads(self.body)


Pieces = Iterable[bytes] | AsyncIterable[bytes]


@dataclass(frozen=True, slots=True)
class MockResponse:
    """What the fake server answers: a whole `body`, or `pieces` sent one at a time."""

    status: int = 200
    content_type: str = "application/json"
    body: bytes = b""
    pieces: Pieces | None = None

    @classmethod
    def json(cls, doc: Any, status: int = 200) -> MockResponse:
        """A JSON answer."""
        return cls(status, "application/json", json.dumps(doc).encode())

    @classmethod
    def stream(cls, pieces: Pieces) -> MockResponse:
        """An event stream sent piece by piece."""
        return cls(200, "text/event-stream", pieces=pieces)


Handler = Callable[[MockRequest], Awaitable[MockResponse]]

SETTLE_TURNS = 200  # far more event-loop turns than a request takes from gather() to a handler


async def settle(turns: int = SETTLE_TURNS) -> None:
    """Let every other ready task run on: a handler that awaits this before it looks at
    what else is in flight sees a whole burst of concurrent requests. It counts event-loop
    turns, not seconds, so a slow or loaded machine cannot lose the race (a 5 ms sleep did)."""
    for _ in range(turns):
        await asyncio.sleep(0)


@dataclass(slots=True)
class _Opened:
    """A `MockResponse` seen through the `Response` protocol."""

    reply: MockResponse
    sent_ns: int | None
    _consumed: bool = False

    @property
    def status(self) -> int:
        return self.reply.status

    @property
    def content_type(self) -> str:
        return self.reply.content_type

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.pieces()])

    async def pieces(self) -> AsyncIterator[bytes]:
        if self._consumed:
            return
        self._consumed = True
        if self.reply.pieces is None:
            if self.reply.body:
                yield self.reply.body
            return
        if isinstance(self.reply.pieces, AsyncIterable):
            async for piece in self.reply.pieces:
                yield piece
        else:
            for piece in self.reply.pieces:
                yield piece


@dataclass(slots=True)
class MockTransport:
    """A `Transport` whose server is `handler`; `requests` lists what was sent, in order."""

    handler: Handler
    requests: list[MockRequest] = field(default_factory=list)

    @contextlib.asynccontextmanager
    async def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> AsyncIterator[Response]:
        """Hand the request to the handler and open its answer (see `Transport.send`)."""
        request = MockRequest(method, url, dict(headers), body)
        self.requests.append(request)
        sent = time.monotonic_ns()  # the whole request is "written" when the handler sees it
        reply = await self.handler(request)
        yield _Opened(reply, sent)
