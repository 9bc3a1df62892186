"""One OpenAI-compatible server as servekit talks to it (shell): health, models, version,
tokenize, metrics and the timed stream, over an injectable `Transport`.

Every bench, validate and discovery call to a server goes through an `Endpoint`; its
fixed deadlines are the constants below, and the per-request ones (`--timeout`,
validate's check timeout) are passed in by the caller. Headers given to the endpoint (the
API key) go with every request to it and are never logged. No method raises on a network
or server failure: each returns None or a classified `JsonReply`/`TimedStream`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from servekit.client.http import (
    MAX_BODY_BYTES,
    JsonReply,
    TimedStream,
    read_at_most,
    request_json,
    stream_request,
)
from servekit.client.transport import Transport, TransportError

HEALTH_TIMEOUT_S = 5.0
"""`/health` when asking whether the server is still up."""
WARM_TIMEOUT_S = 10.0
"""Each `/health` call that opens a keep-alive connection before a point."""
METRICS_TIMEOUT_S = 5.0
"""One `/metrics` scrape."""
MODELS_TIMEOUT_S = 10.0
"""`/v1/models`."""
VERSION_TIMEOUT_S = 5.0
"""`/version`."""
TOKENIZE_TIMEOUT_S = 10.0
"""The most one `/tokenize` call may take, whatever the caller allows: counting a prompt
takes milliseconds, and sizing asks many times, so a stalled `/tokenize` must not cost a
whole request timeout (600 s by default) before servekit counts another way."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server's base URL, the transport that reaches it and the headers it needs."""

    base_url: str
    transport: Transport
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # holds the API key

    def url(self, path: str) -> str:
        """The full URL of `path` (which starts with `/`) on this server."""
        return f"{self.base_url}{path}"

    def at(self, base_url: str, *, headers: Mapping[str, str] | None = None) -> Endpoint:
        """Another server reached over the same transport, with these headers (default: the
        same headers)."""
        return replace(
            self, base_url=base_url, headers=self.headers if headers is None else headers
        )

    async def get_json(self, path: str, *, timeout_s: float) -> JsonReply:
        """GET a JSON document."""
        return await request_json(
            self.transport, "GET", self.url(path), headers=dict(self.headers), timeout_s=timeout_s
        )

    async def post_json(self, path: str, body: dict[str, Any], *, timeout_s: float) -> JsonReply:
        """POST a JSON body and read a JSON answer."""
        return await request_json(
            self.transport, "POST", self.url(path), body, headers=dict(self.headers),
            timeout_s=timeout_s,
        )  # fmt: skip

    async def stream(self, path: str, body: dict[str, Any], *, timeout_s: float) -> TimedStream:
        """POST a streaming completion and time it (see `client/http.py`)."""
        return await stream_request(
            self.transport, self.url(path), body, headers=dict(self.headers), timeout_s=timeout_s
        )

    async def _get_body(self, path: str, timeout_s: float) -> tuple[int, bytes] | None:
        """GET `path` and read its body: (status, body), or None when nothing answers in
        time, the connection fails or the body is larger than `MAX_BODY_BYTES`."""
        try:
            async with asyncio.timeout(timeout_s):
                async with self.transport.send(
                    "GET", self.url(path), body=None, headers=self.headers
                ) as resp:
                    body, more = await read_at_most(resp, MAX_BODY_BYTES)
                    return None if more else (resp.status, body)
        except (TransportError, TimeoutError):
            return None

    async def health(self, *, timeout_s: float = HEALTH_TIMEOUT_S) -> int | None:
        """`/health`'s status code, or None when nothing answers in time."""
        got = await self._get_body("/health", timeout_s)
        return None if got is None else got[0]

    async def warm(self, count: int, *, timeout_s: float = WARM_TIMEOUT_S) -> None:
        """Open `count` keep-alive connections (concurrent `/health` calls, bodies read), so
        no measured request pays for a TCP handshake; failures are ignored."""
        await asyncio.gather(*(self._get_body("/health", timeout_s) for _ in range(count)))

    async def metrics(self, *, timeout_s: float = METRICS_TIMEOUT_S) -> bytes | None:
        """The body of `/metrics` (Prometheus text, undecoded: the caller checks it), or
        None when it does not answer 200 in time."""
        got = await self._get_body("/metrics", timeout_s)
        if got is None or got[0] != 200:
            return None
        return got[1]

    async def models(self, *, timeout_s: float = MODELS_TIMEOUT_S) -> JsonReply:
        """`/v1/models` as a classified reply."""
        return await self.get_json("/v1/models", timeout_s=timeout_s)

    async def version(self, *, timeout_s: float = VERSION_TIMEOUT_S) -> str | None:
        """The server's `/version`, or None when it has none."""
        reply = await self.get_json("/version", timeout_s=timeout_s)
        if reply.error_kind is not None or not isinstance(reply.doc, dict):
            return None
        return str(reply.doc.get("version"))

    async def tokenize(self, body: dict[str, Any], *, timeout_s: float) -> int | None:
        """The token count `/tokenize` gives for `body` (a prompt or chat messages with the
        model), or None when the server has no usable `/tokenize` (or it does not answer
        within `timeout_s`, and at most `TOKENIZE_TIMEOUT_S`)."""
        reply = await self.post_json(
            "/tokenize", body, timeout_s=min(timeout_s, TOKENIZE_TIMEOUT_S)
        )
        count = reply.doc.get("count") if isinstance(reply.doc, dict) else None
        return count if isinstance(count, int) else None


@contextlib.asynccontextmanager
async def open_endpoint(
    base_url: str,
    headers: Mapping[str, str] | None = None,
    *,
    transport: Transport | None = None,
) -> AsyncIterator[Endpoint]:
    """An `Endpoint` for the block: over `transport` when given (the caller owns it), else
    over servekit's aiohttp session (`client/aiohttp_transport.py`), closed on exit."""
    if transport is not None:
        yield Endpoint(base_url, transport, dict(headers or {}))
        return
    from servekit.client.aiohttp_transport import open_transport  # aiohttp only when used

    async with open_transport() as real:
        yield Endpoint(base_url, real, dict(headers or {}))
