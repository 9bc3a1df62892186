"""The streaming client against scripted loopback servers: parsing, accounting, failures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from servekit.client.aiohttp_transport import AiohttpTransport
from servekit.client.http import TimedStream, stream_request

pytestmark = pytest.mark.integration


def chunk(delta: dict[str, Any], *, tokens: int | None = None, finish: str | None = None) -> bytes:
    body: dict[str, Any] = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if tokens is not None:
        body["usage"] = {
            "prompt_tokens": 5,
            "completion_tokens": tokens,
            "total_tokens": 5 + tokens,
        }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def good(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    await resp.write(chunk({"role": "assistant", "content": ""}))  # no tokens yet
    await resp.write(chunk({"reasoning": "think hard"}, tokens=3))
    await resp.write(chunk({"reasoning": " more", "content": "Hel"}, tokens=6))
    await resp.write(chunk({"content": "lo"}, tokens=7))
    args = [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    ]
    await resp.write(chunk({"tool_calls": args}, tokens=9))
    more = [{"index": 0, "function": {"arguments": ": 1}"}}]
    await resp.write(chunk({"tool_calls": more}, tokens=10, finish="tool_calls"))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def no_usage(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    for piece in ("a", "b", "c"):
        await resp.write(chunk({"content": piece}))
    final = {"id": "x", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 8}}
    await resp.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
    return resp


async def bad_json(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    await resp.write(b"data: {not json\n\n")
    await resp.write(chunk({"content": "x"}, tokens=1))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def no_done(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    await resp.write(chunk({"content": "x"}, tokens=1))
    return resp


async def cut(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    await resp.write(chunk({"content": "x"}, tokens=1) + b'data: {"id": "x", "cho')
    assert request.transport is not None
    request.transport.close()
    return resp


async def hang(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    await asyncio.sleep(2)  # longer than the client waits; short so cleanup is quick
    return resp


def status(code: int, message: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        error = {
            "error": {"message": message, "type": "BadRequestError", "param": None, "code": code}
        }
        return web.json_response(error, status=code)

    return handler


async def call(path: str, timeout_s: float = 10.0) -> TimedStream:
    app = web.Application()
    for name, handler in {
        "/good": good, "/no_usage": no_usage, "/bad_json": bad_json, "/no_done": no_done,
        "/cut": cut, "/hang": hang,
        "/ctx": status(400, "This model's maximum context length is 10 tokens. However, ..."),
        "/e500": status(500, "boom"), "/e429": status(429, "slow down"),
    }.items():  # fmt: skip
        app.router.add_post(name, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            return await stream_request(
                AiohttpTransport(session),
                f"http://127.0.0.1:{port}{path}",
                {"stream": True},
                timeout_s=timeout_s,
            )
    finally:
        await runner.cleanup()


def test_reasoning_content_tools_and_continuous_usage() -> None:
    """Deltas are kept apart, tool calls reassemble by index, tokens per chunk from usage."""
    r = asyncio.run(call("/good")).result
    assert r.error_kind is None
    assert r.reasoning_text == "think hard more"
    assert r.text == "Hello"
    assert r.chunk_tokens == [3, 3, 1, 2, 1]
    assert sum(r.chunk_tokens) == r.completion_tokens == 10
    assert r.reasoning_tokens == 3
    assert r.tool_calls[0].name == "f"
    assert json.loads(r.tool_calls[0].arguments) == {"a": 1}
    assert r.finish_reason == "tool_calls"
    assert r.first_token_ns == r.chunk_ns[0]
    assert r.first_answer_ns == r.chunk_ns[1]


def test_final_usage_is_spread_over_chunks() -> None:
    """Without per-chunk usage the final count is distributed over the text chunks."""
    r = asyncio.run(call("/no_usage")).result
    assert r.chunk_tokens == [2, 3, 3]
    assert r.error_kind is None


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/bad_json", "malformed_chunk"),
        ("/no_done", "stream_cut"),
        ("/cut", "stream_cut"),
        ("/ctx", "context_length"),
        ("/e500", "http_500"),
        ("/e429", "http_429"),
    ],
)
def test_failures_are_classified(path: str, kind: str) -> None:
    """Malformed, cut and rejected streams come back classified, never raised."""
    timed = asyncio.run(call(path))
    assert timed.result.error_kind == kind
    assert timed.end_ns >= timed.sent_ns


def test_hang_times_out() -> None:
    """A server that never answers is a timeout after the allowed time."""
    assert asyncio.run(call("/hang", timeout_s=0.3)).result.error_kind == "timeout"


def test_connection_refused() -> None:
    """Nothing listening is a connect failure."""

    async def go() -> TimedStream:
        async with aiohttp.ClientSession() as session:
            return await stream_request(AiohttpTransport(session), "http://127.0.0.1:9/v1/x", {})

    assert asyncio.run(go()).result.error_kind == "connect"
