"""A scripted streaming server that records the truth (run as a script by the tests).

Every request: the clock starts when the body has been read; the first chunk leaves after
TTFT_MS, then one chunk every GAP_MS, each carrying TOKENS_PER_CHUNK tokens (the last one
the remainder), the first REASONING tokens as `reasoning`, the rest as `content`, with
vLLM's continuous usage on every chunk. The server appends, per request, the monotonic
time it read the request and the time each chunk was written, to the truth file.

Usage: python scripted_server.py PORT TRUTH_FILE
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from aiohttp import web

TTFT_MS, GAP_MS, TOKENS_PER_CHUNK, OUTPUT, REASONING = 200, 20, 3, 128, 32


async def chat(request: web.Request) -> web.StreamResponse:
    await request.read()
    read_ns = time.monotonic_ns()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    sent: list[int] = []
    done = 0
    index = 0
    while done < OUTPUT:
        due = read_ns + (TTFT_MS + index * GAP_MS) * 1_000_000
        delay = (due - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        n = min(TOKENS_PER_CHUNK, OUTPUT - done)
        reasoning = max(0, min(n, REASONING - done))
        delta: dict[str, str] = {}
        if reasoning:
            delta["reasoning"] = " r" * reasoning
        if n - reasoning:
            delta["content"] = " c" * (n - reasoning)
        done += n
        chunk = {
            "id": "s",
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": "length" if done == OUTPUT else None}
            ],
            "usage": {"prompt_tokens": 8, "completion_tokens": done, "total_tokens": 8 + done},
        }
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        sent.append(time.monotonic_ns())
        index += 1
    await resp.write(b"data: [DONE]\n\n")
    request.app["truth"].write(json.dumps({"read_ns": read_ns, "sent_ns": sent}) + "\n")
    request.app["truth"].flush()
    return resp


async def ok(request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "scripted", "max_model_len": 4096}]})


async def health(request: web.Request) -> web.Response:
    return web.Response(text="")


def main() -> None:
    port, truth = int(sys.argv[1]), sys.argv[2]
    app = web.Application()
    app["truth"] = open(truth, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the app
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", ok)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
