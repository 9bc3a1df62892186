"""The real transport over aiohttp (shell): the one place sessions are configured.

`open_transport()` opens the session every servekit client uses: an unlimited connection
pool with keep-alive (a load test's concurrency is its own limit), DNS cached for the run,
no session-wide timeout (each call has its own, set by the client), and the trace hook that
timestamps when each request's last byte is written (the t0 of `client/http.py`).
"""

from __future__ import annotations

import contextlib
import errno
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import yarl

from servekit.client.transport import ConnectFailed, Disconnected, Response, TransportError

DNS_CACHE_S = 300


@dataclass(slots=True)
class _SendTime:
    ns: int | None = None


async def _on_sent(
    session: aiohttp.ClientSession,
    ctx: Any,
    params: aiohttp.TraceRequestChunkSentParams | aiohttp.TraceRequestHeadersSentParams,
) -> None:
    holder = ctx.trace_request_ctx
    if isinstance(holder, _SendTime):
        holder.ns = time.monotonic_ns()  # the latest write: headers, then the body


def timing_trace_config() -> aiohttp.TraceConfig:
    """A trace config that timestamps when each request's bytes are written; every session
    wrapped in an `AiohttpTransport` should have it (without it, t0 falls back to the
    moment before the call)."""
    config = aiohttp.TraceConfig()
    config.on_request_headers_sent.append(_on_sent)
    config.on_request_chunk_sent.append(_on_sent)
    return config


class _AiohttpResponse:
    """An aiohttp response seen through the `Response` protocol."""

    __slots__ = ("_resp", "_written")

    def __init__(self, resp: aiohttp.ClientResponse, written: _SendTime) -> None:
        self._resp = resp
        self._written = written

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def content_type(self) -> str:
        return self._resp.content_type  # aiohttp's default without the header

    @property
    def sent_ns(self) -> int | None:
        return self._written.ns

    async def read(self) -> bytes:
        return await self._resp.read()

    def pieces(self) -> AsyncIterator[bytes]:
        return self._resp.content.iter_any()  # aiohttp's own iterator: no per-piece wrapper


_REASONS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ETIMEDOUT: "the connection timed out",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "the network is unreachable",
    errno.ECONNRESET: "the connection was reset",
    errno.EADDRNOTAVAIL: "the address is not available",
}


def connect_reason(exc: aiohttp.ClientConnectorError) -> str:
    """Why a connection could not be made, in a few words of servekit's (aiohttp's own text
    reads "Cannot connect to host 127.0.0.1:9 ssl:default [Connect call failed ...]")."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"the host name {exc.host} does not resolve"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "its TLS certificate is not trusted"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "the TLS handshake failed"
    code = exc.os_error.errno
    if code in _REASONS:
        return _REASONS[code]
    words = exc.os_error.strerror or type(exc.os_error).__name__
    return words[:1].lower() + words[1:]


class AiohttpTransport:
    """A `Transport` over a caller's aiohttp session; aiohttp's failures become
    `TransportError`s (a timeout stays a `TimeoutError`)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    @contextlib.asynccontextmanager
    async def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> AsyncIterator[Response]:
        """Open the response to one request (see `Transport.send`)."""
        written = _SendTime()
        opened = False
        try:
            async with self.session.request(
                method, url, data=body, headers=dict(headers), trace_request_ctx=written
            ) as resp:
                opened = True
                yield _AiohttpResponse(resp, written)
        except TimeoutError:
            raise
        except aiohttp.ClientConnectorError as exc:
            origin = yarl.URL(url).origin()
            raise ConnectFailed(
                type(exc).__name__, f"cannot connect to {origin}: {connect_reason(exc)}"
            ) from exc
        except aiohttp.ServerDisconnectedError as exc:
            # its text is aiohttp's repr of the half-parsed message: say what happened
            where = "mid-body" if opened else "before its response headers ended"
            raise Disconnected(
                type(exc).__name__, f"the server closed the connection {where}"
            ) from exc
        except aiohttp.ClientPayloadError as exc:
            raise Disconnected(type(exc).__name__, str(exc)) from exc
        except aiohttp.ClientError as exc:
            raise TransportError(type(exc).__name__, str(exc)) from exc


@contextlib.asynccontextmanager
async def open_transport() -> AsyncIterator[AiohttpTransport]:
    """Open servekit's one kind of session (see the module docstring) as a transport."""
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=DNS_CACHE_S),
        trace_configs=[timing_trace_config()],
        timeout=aiohttp.ClientTimeout(total=None),  # every call has its own deadline
    ) as session:
        yield AiohttpTransport(session)
