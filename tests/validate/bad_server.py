"""A loopback server whose chat endpoint misbehaves in one way (run as a script by tests).

Usage: python bad_server.py PORT MODE, MODE one of: bad_json, cut, wrong_type, http_500, hang.
/health and /v1/models answer normally.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web

MODE = sys.argv[2]


def chunk(text: str) -> bytes:
    body = {
        "id": "b",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if MODE == "http_500":
        return web.json_response({"error": {"message": "boom", "code": 500}}, status=500)
    if MODE == "hang":
        await asyncio.sleep(30)
    if MODE == "wrong_type":
        return web.Response(text="<html>gateway says hello</html>", content_type="text/html")
    if not body.get("stream"):
        return web.json_response(
            {
                "id": "b",
                "object": "chat.completion",
                "model": "bad",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Hello there."},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
            }
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(chunk("Hello"))
    if MODE == "bad_json":
        await resp.write(b"data: {not json\n\n")
    if MODE == "cut":
        await resp.write(b'data: {"id": "b", "cho')
        assert request.transport is not None
        request.transport.close()
        return resp
    await resp.write(chunk(" there."))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def models(request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "bad", "max_model_len": 4096}]})


async def health(request: web.Request) -> web.Response:
    return web.Response(text="")


app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
app.router.add_get("/v1/models", models)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
