"""Timed OpenAI-compatible requests over a `Transport` (shell): every asynchronous request
servekit sends to a server goes through here (`Endpoint` in `client/endpoint.py` is the friendly
layer; `probe.py` and `download.py` hold the few synchronous calls).

Timestamps are integer nanoseconds from `time.monotonic_ns()`: t0 is taken when the
request's last byte has been written to the connection (the transport's `sent_ns`, an
aiohttp trace hook in `client/aiohttp_transport.py`, so time spent waiting for a connection
or for the event loop before the write is not counted as server latency; transports that
cannot tell fall back to the moment before the call), and each arrival time when a piece of
the response body arrives, before any parsing. Connections are reused by the caller's
transport. Failures never raise: they come back classified (connect, timeout, http_<status>,
context_length, stream_cut, malformed_chunk, empty_output, server_error, wrong_content_type,
line_too_long, invalid_usage).
Every call has its own deadline (`timeout_s`), set here and not in the transport.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from servekit import jsontext
from servekit.client.sse import SseLineTooLong, SseParser
from servekit.client.stream import STREAM_CUT, StreamReader, StreamResult
from servekit.client.transport import (
    ConnectFailed,
    Disconnected,
    Response,
    Transport,
    TransportError,
)

CONTEXT_LENGTH = "context_length"
CONNECT = "connect"
TIMEOUT = "timeout"
WRONG_CONTENT_TYPE = "wrong_content_type"
LINE_TOO_LONG = "line_too_long"
# Answers to a streaming request that are certainly not a stream: a JSON document (the
# server ignored `stream: true`) or a page (a proxy or gateway). Other types, including
# none, are read as SSE: the parser classifies what does not parse.
NOT_A_STREAM = frozenset({"application/json", "text/html", "text/plain", "application/xml"})


MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest body read whole (a JSON reply, /metrics); a larger one is `body_too_large`.
vLLM's /metrics of a large deployment is a few hundred kB, /v1/models a few kB."""
MAX_ERROR_BYTES = 64 * 1024
"""What is read of a refusal's or a wrong content type's body: enough for any message."""
MAX_MESSAGE_CHARS = 500
"""A server's error message is cut to this before it reaches records and the terminal."""
BODY_TOO_LARGE = "body_too_large"


async def read_at_most(resp: Response, limit: int) -> tuple[bytes, bool]:
    """The body's first `limit` bytes and whether there was more (the rest is not read:
    leaving the response closes the connection)."""
    parts: list[bytes] = []
    size = 0
    async for piece in resp.pieces():
        parts.append(piece)
        size += len(piece)
        if size > limit:
            return b"".join(parts)[:limit], True
    return b"".join(parts), False


def _one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A server's text on one line of printable characters, at most `limit` of them."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class TimedStream:
    """One streamed request: when it was sent and ended, and what arrived."""

    sent_ns: int
    end_ns: int
    status: int | None
    result: StreamResult


def _error_message(body: bytes) -> str:
    """A refusal's message on one bounded line: the OpenAI `error.message`, else the body."""
    try:
        doc: Any = json.loads(body)
    except jsontext.LOAD_FAILURES:
        return _one_line(body[:300].decode("utf-8", "replace"))
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return _one_line(str(err["message"]))
        if isinstance(doc.get("message"), str):
            return _one_line(str(doc["message"]))
    return _one_line(str(doc)[:300])


async def stream_request(
    transport: Transport,
    url: str,
    body: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 600.0,
) -> TimedStream:
    """POST a streaming request and read it to the end, timing every piece.

    Args:
        transport: a transport whose connections stay warm.
        url: the full endpoint URL (…/v1/chat/completions or …/v1/completions).
        body: the request JSON (must ask for `stream: true`).
        headers: extra headers (e.g. authorization); never logged.
        timeout_s: total time allowed for the request.
    """
    limit = body.get("max_tokens")
    reader = StreamReader(max_tokens=limit if isinstance(limit, int) else None)
    parser = SseParser()
    status: int | None = None
    payload = json.dumps(body).encode()
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    sent = time.monotonic_ns()
    failure: tuple[str, str] | None = None
    cut = False
    try:
        async with asyncio.timeout(timeout_s):
            async with transport.send("POST", url, body=payload, headers=all_headers) as resp:
                sent = resp.sent_ns or sent
                status = resp.status
                if status != 200:
                    message = _error_message((await read_at_most(resp, MAX_ERROR_BYTES))[0])
                    reader.result.error_kind = _status_kind(status, message)
                    reader.result.error = message
                    return TimedStream(sent, time.monotonic_ns(), status, reader.result)
                if resp.content_type in NOT_A_STREAM:
                    start, _ = await read_at_most(resp, MAX_ERROR_BYTES)
                    body_start = _one_line(start[:200].decode("utf-8", "replace"), 200)
                    reader.result.error_kind = WRONG_CONTENT_TYPE
                    reader.result.error = (
                        f"answered Content-Type {resp.content_type or '(none)'!r}, not "
                        f"text/event-stream: {body_start!r}"
                    )
                    return TimedStream(sent, time.monotonic_ns(), status, reader.result)
                async for piece in resp.pieces():
                    arrived = time.monotonic_ns()
                    # Yield once so every stream whose bytes arrived in the same poll stamps
                    # them before any of us spends time parsing (stamp first, work later).
                    await asyncio.sleep(0)
                    try:
                        events = parser.feed_data(piece)
                    except SseLineTooLong as exc:
                        for event in exc.events:
                            reader.feed(event.data, arrived)
                        failure = (LINE_TOO_LONG, f"{exc}: not an event stream")
                        break  # leaving the block closes the connection
                    for data in events:
                        reader.feed(data, arrived)
    except TimeoutError:
        cut, failure = True, (TIMEOUT, f"no end within {timeout_s} s")
    except ConnectFailed as exc:
        failure = (CONNECT, exc.text)
    except Disconnected as exc:
        if status is None:  # no status line and headers: nothing of an answer arrived
            cut, failure = True, ("", exc.text)
        else:
            cut, failure = True, ("", f"connection closed mid-stream ({exc.name})")
    except TransportError as exc:
        cut, failure = True, ("", str(exc))
    end = time.monotonic_ns()
    if failure is None or cut:
        reader.finish(cut=cut)
    elif failure[0] == LINE_TOO_LONG:
        reader.finish()
    if failure is not None:
        kind, message = failure
        reader.result.error_kind = kind or reader.result.error_kind
        reader.result.error = message
    return TimedStream(sent, end, status, reader.result)


def _status_kind(status: int, message: str) -> str:
    """A refusal's class: `context_length` for vLLM's over-long prompt 400, else http_<status>."""
    if status == 400 and "maximum context length" in message:
        return CONTEXT_LENGTH
    return f"http_{status}"


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
    transport: Transport,
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
    payload = None if body is None else json.dumps(body).encode()
    all_headers = dict(headers or {})
    if payload is not None:
        all_headers.setdefault("Content-Type", "application/json")
    try:
        async with asyncio.timeout(timeout_s):
            async with transport.send(method, url, body=payload, headers=all_headers) as resp:
                status, content_type = resp.status, resp.content_type
                raw, more = await read_at_most(
                    resp, MAX_BODY_BYTES if status == 200 else MAX_ERROR_BYTES
                )
    except TimeoutError:
        return JsonReply(
            status, None, time.monotonic() - start, TIMEOUT, f"no answer within {timeout_s:g} s"
        )
    except ConnectFailed as exc:
        return JsonReply(None, None, time.monotonic() - start, CONNECT, exc.text)
    except Disconnected as exc:
        return JsonReply(status, None, time.monotonic() - start, STREAM_CUT, exc.text)
    except TransportError as exc:
        return JsonReply(status, None, time.monotonic() - start, STREAM_CUT, str(exc))
    elapsed = time.monotonic() - start
    if status == 200 and more:
        problem = f"the body is larger than {MAX_BODY_BYTES} bytes"
        return JsonReply(status, None, elapsed, BODY_TOO_LARGE, problem, content_type)
    if status != 200:
        message = _error_message(raw)
        return JsonReply(
            status, None, elapsed, _status_kind(status, message), message, content_type
        )
    try:
        doc = json.loads(raw) if raw else None
    except jsontext.LOAD_FAILURES as exc:
        problem = jsontext.load_problem(exc)
        return JsonReply(
            status, None, elapsed, "not_json", f"the body is not JSON ({problem})", content_type
        )
    return JsonReply(status, doc, elapsed, None, None, content_type)
