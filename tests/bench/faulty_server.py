"""A loopback server whose chat streams fail in turn (run as a script by the tests).

Request n (counting from 0) gets behaviour n % 7: a good stream, invalid JSON, a cut
mid-chunk, a stream without [DONE], HTTP 500, HTTP 429, or a hang.

Usage: python faulty_server.py PORT
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys

from aiohttp import web

COUNTER = itertools.count()


def chunk(text: str, done: int) -> bytes:
    body = {
        "id": "f",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        "usage": {"prompt_tokens": 4, "completion_tokens": done, "total_tokens": 4 + done},
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    await request.read()
    kind = next(COUNTER) % 7
    if kind == 4:
        return web.json_response({"error": {"message": "boom", "code": 500}}, status=500)
    if kind == 5:
        return web.json_response({"error": {"message": "slow down", "code": 429}}, status=429)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if kind == 6:
        await asyncio.sleep(3)
        return resp
    if kind == 1:
        await resp.write(b"data: {not json\n\n")
    await resp.write(chunk("a", 1))
    await resp.write(chunk("b", 2))
    if kind == 2:
        await resp.write(b'data: {"id": "f", "cho')
        assert request.transport is not None
        request.transport.close()
        return resp
    if kind != 3:
        await resp.write(b"data: [DONE]\n\n")
    return resp


async def models(request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "faulty", "max_model_len": 4096}]})


async def health(request: web.Request) -> web.Response:
    return web.Response(text="")


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
