"""Timed OpenAI-compatible requests over aiohttp (shell): the only HTTP code in servekit.

Timestamps are integer nanoseconds from `time.monotonic_ns()`: t0 is taken when the
request's last byte has been written to the connection (an aiohttp trace hook, so time
spent waiting for a connection or for the event loop before the write is not counted as
server latency; sessions without the hook fall back to the moment before the call), and
each arrival time when a piece of the response body arrives, before any parsing.
Connections are reused by the caller's session. Failures never raise: they come back
classified (connect, timeout, http_<status>, context_length, stream_cut, malformed_chunk,
empty_output, server_error, wrong_content_type).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from servekit.client.sse import SseParser
from servekit.client.stream import StreamReader, StreamResult

CONTEXT_LENGTH = "context_length"
CONNECT = "connect"
TIMEOUT = "timeout"
WRONG_CONTENT_TYPE = "wrong_content_type"
# Answers to a streaming request that are certainly not a stream: a JSON document (the
# server ignored `stream: true`) or a page (a proxy or gateway). Other types, including
# none, are read as SSE: the parser classifies what does not parse.
NOT_A_STREAM = frozenset({"application/json", "text/html", "text/plain", "application/xml"})


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
    """A trace config that timestamps when each request's bytes are written; pass it to
    every ClientSession used with `stream_request`."""
    config = aiohttp.TraceConfig()
    config.on_request_headers_sent.append(_on_sent)
    config.on_request_chunk_sent.append(_on_sent)
    return config


@dataclass(frozen=True, slots=True)
class TimedStream:
    """One streamed request: when it was sent and ended, and what arrived."""

    sent_ns: int
    end_ns: int
    status: int | None
    result: StreamResult


def _error_message(body: bytes) -> str:
    try:
        doc: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body[:300].decode("utf-8", "replace")
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(doc.get("message"), str):
            return str(doc["message"])
    return str(doc)[:300]


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 600.0,
) -> TimedStream:
    """POST a streaming request and read it to the end, timing every piece.

    Args:
        session: a session whose connector keeps connections warm.
        url: the full endpoint URL (…/v1/chat/completions or …/v1/completions).
        body: the request JSON (must ask for `stream: true`).
        headers: extra headers (e.g. authorization); never logged.
        timeout_s: total time allowed for the request.
    """
    reader = StreamReader()
    parser = SseParser()
    status: int | None = None
    payload = json.dumps(body).encode()
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    sent = time.monotonic_ns()
    written = _SendTime()
    failure: tuple[str, str] | None = None
    cut = False
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(
                url, data=payload, headers=all_headers, trace_request_ctx=written
            ) as resp:
                sent = written.ns or sent
                status = resp.status
                if status != 200:
                    message = _error_message(await resp.read())
                    kind = (
                        CONTEXT_LENGTH
                        if status == 400 and "maximum context length" in message
                        else f"http_{status}"
                    )
                    reader.result.error_kind, reader.result.error = kind, message
                    return TimedStream(sent, time.monotonic_ns(), status, reader.result)
                if resp.content_type in NOT_A_STREAM:
                    body_start = (await resp.read())[:200].decode("utf-8", "replace")
                    reader.result.error_kind = WRONG_CONTENT_TYPE
                    reader.result.error = (
                        f"answered Content-Type {resp.content_type or '(none)'!r}, not "
                        f"text/event-stream: {body_start!r}"
                    )
                    return TimedStream(sent, time.monotonic_ns(), status, reader.result)
                async for piece in resp.content.iter_any():
                    arrived = time.monotonic_ns()
                    # Yield once so every stream whose bytes arrived in the same poll stamps
                    # them before any of us spends time parsing (stamp first, work later).
                    await asyncio.sleep(0)
                    for event in parser.feed(piece):
                        reader.feed(event.data, arrived)
    except TimeoutError:
        cut, failure = True, (TIMEOUT, f"no end within {timeout_s} s")
    except aiohttp.ClientConnectorError as exc:
        failure = (CONNECT, str(exc))
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
        cut, failure = True, ("", f"connection closed mid-stream ({type(exc).__name__})")
    except aiohttp.ClientError as exc:
        cut, failure = True, ("", f"{type(exc).__name__}: {exc}")
    end = time.monotonic_ns()
    if failure is None or cut:
        reader.finish(cut=cut)
    if failure is not None:
        kind, message = failure
        reader.result.error_kind = kind or reader.result.error_kind
        reader.result.error = message
    return TimedStream(sent, end, status, reader.result)


@dataclass(frozen=True, slots=True)
class JsonReply:
    """A non-streaming request's outcome: the status and JSON document, or a classified
    failure (`error_kind` as for streams, plus `not_json` for a body that is not JSON)."""

    status: int | None
    doc: Any
    elapsed_s: float
    error_kind: str | None = None
    error: str | None = None
    content_type: str = ""


async def request_json(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 60.0,
) -> JsonReply:
    """GET or POST and read a JSON answer; never raises on a network or server failure."""
    start = time.monotonic()
    status: int | None = None
    content_type = ""
    try:
        async with asyncio.timeout(timeout_s):
            async with session.request(method, url, json=body, headers=headers) as resp:
                status, content_type = resp.status, resp.content_type
                raw = await resp.read()
    except TimeoutError:
        return JsonReply(
            status, None, time.monotonic() - start, TIMEOUT, f"no answer within {timeout_s:g} s"
        )
    except aiohttp.ClientConnectorError as exc:
        return JsonReply(None, None, time.monotonic() - start, CONNECT, str(exc))
    except aiohttp.ClientError as exc:
        return JsonReply(
            status, None, time.monotonic() - start, "stream_cut", f"{type(exc).__name__}: {exc}"
        )
    elapsed = time.monotonic() - start
    if status != 200:
        message = _error_message(raw)
        kind = (
            CONTEXT_LENGTH
            if status == 400 and "maximum context length" in message
            else f"http_{status}"
        )
        return JsonReply(status, None, elapsed, kind, message, content_type)
    try:
        doc = json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return JsonReply(
            status, None, elapsed, "not_json", f"the body is not JSON ({exc})", content_type
        )
    return JsonReply(status, doc, elapsed, None, None, content_type)
