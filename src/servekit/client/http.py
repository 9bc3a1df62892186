"""Timed OpenAI-compatible requests over aiohttp (shell): the only HTTP code in servekit.

Timestamps are integer nanoseconds from `time.monotonic_ns()`, taken when the request is
handed to the connection (t0) and when each piece of the response body arrives, before
any parsing. Connections are reused by the caller's session. Failures never raise: they
come back classified (connect, timeout, http_<status>, context_length, stream_cut,
malformed_chunk, empty_output, server_error).
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
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url, data=payload, headers=all_headers) as resp:
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
                async for piece in resp.content.iter_any():
                    arrived = time.monotonic_ns()
                    for event in parser.feed(piece):
                        reader.feed(event.data, arrived)
        reader.finish()
    except TimeoutError:
        reader.finish(cut=True)
        reader.result.error_kind, reader.result.error = TIMEOUT, f"no end within {timeout_s} s"
    except aiohttp.ClientConnectorError as exc:
        reader.result.error_kind, reader.result.error = CONNECT, str(exc)
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
        reader.finish(cut=True)
        reader.result.error = f"connection closed mid-stream ({type(exc).__name__})"
    except aiohttp.ClientError as exc:
        reader.finish(cut=True)
        reader.result.error = f"{type(exc).__name__}: {exc}"
    return TimedStream(sent, time.monotonic_ns(), status, reader.result)
