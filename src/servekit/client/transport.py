"""The transport seam (core): what servekit's client needs from an HTTP stack, and its errors.

`Endpoint` and the timed requests in `client/http.py` speak only to a `Transport`: one
`send` that opens a response. `client/aiohttp_transport.py` is the real one and
`client/mock.py` an in-process fake for tests. A transport sets no timeouts: the client
wraps every call in its own deadline, so a transport that never answers is still cut.
Failures below HTTP are raised as `TransportError` subclasses (or `TimeoutError`, which the
stack's own timeouts subclass), so no module outside `client/` names the stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol


class TransportError(Exception):
    """A request failed below HTTP (no usable answer).

    Attributes:
        name: the underlying failure's type name (e.g. `ClientPayloadError`).
        text: its message.
    """

    def __init__(self, name: str, text: str) -> None:
        super().__init__(f"{name}: {text}")
        self.name = name
        self.text = text


class ConnectFailed(TransportError):
    """No connection could be made (refused, unresolvable, unreachable); `text` is one line
    of servekit's: "cannot connect to http://127.0.0.1:9: connection refused"."""


CONNECT_HINT = "is the server running?"
CONNECT_FIX = f"{CONNECT_HINT} check --url (host and port)"
"""What to do about a `ConnectFailed`."""


class Disconnected(TransportError):
    """The connection closed while the response body was still arriving."""


class Response(Protocol):
    """An open response: status and type are known, the body is still to be read."""

    @property
    def status(self) -> int:
        """The HTTP status code."""
        ...

    @property
    def content_type(self) -> str:
        """The media type without parameters (`text/event-stream`)."""
        ...

    @property
    def sent_ns(self) -> int | None:
        """`time.monotonic_ns()` when the request's last byte was written, or None when
        the transport cannot tell."""
        ...

    async def read(self) -> bytes:
        """The whole (remaining) body."""
        ...

    def pieces(self) -> AsyncIterator[bytes]:
        """The body in pieces as they arrive from the network (any split)."""
        ...


class Transport(Protocol):
    """Sends one request and opens its response."""

    def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> AbstractAsyncContextManager[Response]:
        """Open the response to a request; leaving the context releases the connection.

        Raises:
            ConnectFailed: no connection could be made.
            Disconnected: the connection closed while the body was being read.
            TransportError: any other failure below HTTP.
        """
        ...
