"""A loopback OpenAI-style server that echoes the client's credentials everywhere it can
(run as a script by the tests).

The Authorization header as received, and for basic auth the decoded `user:password`, go
into the model id and root of /v1/models, /version, a /metrics label and comment, the 404
body of /tokenize, every answer's content (streamed whole and split across two chunks),
tool-call arguments, finish reasons and error bodies. Chat request n (counting from 0) gets
behaviour n % 3: a good answer, HTTP 500 with the echo in its message, or HTTP 200 as
text/html quoting the echo (a wrong content type).

Usage: python echo_server.py PORT
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import sys

from aiohttp import web

COUNTER = itertools.count()


def echo(request: web.Request) -> str:
    """What the client sent to authenticate, as plainly as the server can see it."""
    header = request.headers.get("Authorization", "")
    kind, _, token = header.partition(" ")
    if kind.lower() == "basic":
        try:
            return f"{header} {base64.b64decode(token).decode('utf-8', 'replace')}"
        except (binascii.Error, ValueError):
            return header
    return f"{header} {token}"


def chunk(delta: dict[str, object], done: int, finish: str | None = None) -> bytes:
    """One SSE event of a chat.completion.chunk with usage."""
    body = {
        "id": "echo",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": {"prompt_tokens": 4, "completion_tokens": done, "total_tokens": 4 + done},
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    """A chat answer that echoes the credentials (good, 500 or wrong content type in turn)."""
    body = await request.json()
    said = echo(request)
    kind = next(COUNTER) % 3
    if kind == 1:
        message = f"invalid credentials {said}"
        return web.json_response({"error": {"message": message, "code": 500}}, status=500)
    if kind == 2:
        return web.Response(text=f"<html>{said}</html>", content_type="text/html")
    content = f"you sent {said}"
    if not body.get("stream"):
        message = {
            "role": "assistant",
            "content": content,
            "reasoning": said,
            "tool_calls": [
                {"id": said, "type": "function", "function": {"name": said, "arguments": said}}
            ],
        }
        return web.json_response({
            "id": "echo",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": said}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
        })  # fmt: skip
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    half = len(content) // 2
    await resp.write(chunk({"reasoning": said}, 1))
    await resp.write(chunk({"content": content[:half]}, 2))
    await resp.write(chunk({"content": content[half:]}, 3))
    await resp.write(chunk({"content": f" and again {said}"}, 4, finish="length"))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def models(request: web.Request) -> web.Response:
    """The one model, named after the credentials."""
    said = echo(request)
    entry = {"id": f"echo {said}", "root": said, "owned_by": said, "max_model_len": 2048}
    return web.json_response({"object": "list", "data": [entry]})


async def version(request: web.Request) -> web.Response:
    """A version string holding the credentials (and a newline)."""
    return web.json_response({"version": f"0.0.echo\n{echo(request)}"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text with the credentials in a comment and a label."""
    said = echo(request).replace('"', "'")
    text = (
        f"# HELP vllm:num_requests_running {said}\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="{said}"}} 0\n'
    )
    return web.Response(text=text, content_type="text/plain")


async def tokenize(request: web.Request) -> web.Response:
    """No /tokenize, saying so with the credentials."""
    return web.json_response(
        {"error": {"message": f"no tokenizer for {echo(request)}"}}, status=404
    )


async def health(request: web.Request) -> web.Response:
    """Healthy."""
    return web.Response(text="")


def main() -> None:
    """Serve on 127.0.0.1:PORT."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
