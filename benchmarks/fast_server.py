"""A fast loopback OpenAI-style server for client-cost benchmarks (not a test; not servekit).

Every chat or completions request is answered at once with 256 one-token chunks, written
`PER_WRITE` chunks at a time (argv[2], default 32: the client, not the server, is the
limit), in vLLM 0.32's shapes: usage on every chunk when `stream_options` asks for
`continuous_usage_stats`, a final usage-only chunk when it asks for `include_usage`, each
choice's `token_ids` when the body has `return_token_ids`, the chat role chunk first. The
streams are built once per shape, so the server's own cost is a few writes per request.

Run: python benchmarks/fast_server.py PORT [PER_WRITE]
"""

from __future__ import annotations

import json
import sys
from functools import cache

from aiohttp import web

TOKENS = 256
PROMPT = 4


def _chunk(chat: bool, done: int, usage: bool, ids: bool) -> bytes:
    if chat:
        choice: dict[str, object] = {"index": 0, "delta": {"content": " t"}, "logprobs": None,
                                     "finish_reason": None}  # fmt: skip
    else:
        choice = {"index": 0, "text": " t", "logprobs": None, "finish_reason": None}
    if done == TOKENS:
        choice["finish_reason"] = "length"
    if ids:
        choice["token_ids"] = [1000 + done]
    body: dict[str, object] = {
        "id": "cmpl-fast", "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 1, "model": "fast", "choices": [choice],
    }  # fmt: skip
    if usage:
        body["usage"] = {"prompt_tokens": PROMPT, "completion_tokens": done,
                         "total_tokens": PROMPT + done}  # fmt: skip
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@cache
def stream(chat: bool, usage: bool, final: bool, ids: bool, per_write: int) -> list[bytes]:
    """The writes of one answer of this shape."""
    events = []
    if chat:
        role = {"id": "cmpl-fast", "object": "chat.completion.chunk", "created": 1,
                "model": "fast", "choices": [{"index": 0, "delta": {"role": "assistant",
                "content": ""}, "logprobs": None, "finish_reason": None}]}  # fmt: skip
        if usage:
            role["usage"] = {"prompt_tokens": PROMPT, "completion_tokens": 0,
                             "total_tokens": PROMPT}  # fmt: skip
        events.append(b"data: " + json.dumps(role).encode() + b"\n\n")
    events += [_chunk(chat, done, usage, ids) for done in range(1, TOKENS + 1)]
    if final:
        tail = {"id": "cmpl-fast", "object": "chat.completion.chunk" if chat else
                "text_completion", "created": 1, "model": "fast", "choices": [],
                "usage": {"prompt_tokens": PROMPT, "completion_tokens": TOKENS,
                          "total_tokens": PROMPT + TOKENS}}  # fmt: skip
        events.append(b"data: " + json.dumps(tail).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return [b"".join(events[i : i + per_write]) for i in range(0, len(events), per_write)]


def make_app(per_write: int) -> web.Application:
    """The server's application."""

    async def answer(request: web.Request, chat: bool) -> web.StreamResponse:
        body = await request.json()
        options = body.get("stream_options") or {}
        final = bool(options.get("include_usage"))
        usage = final and bool(options.get("continuous_usage_stats"))
        ids = bool(body.get("return_token_ids"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in stream(chat, usage, final, ids, per_write):
            await resp.write(part)
        return resp

    async def chat(request: web.Request) -> web.StreamResponse:
        return await answer(request, True)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await answer(request, False)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fast", "max_model_len": 4096}]})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


if __name__ == "__main__":
    web.run_app(make_app(int(sys.argv[2]) if len(sys.argv) > 2 else 32), host="127.0.0.1",
                port=int(sys.argv[1]), print=None, access_log=None)  # fmt: skip
