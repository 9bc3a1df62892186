"""A loopback OpenAI-style server that echoes the client's credentials everywhere it can
(run as a script by the tests).

The Authorization header as received, and for basic auth the decoded `user:password`, go
into the model id and root of /v1/models, /version, a /metrics label and comment, the 404
body of /tokenize, every answer's content (streamed whole and split across two chunks),
tool-call arguments, finish reasons and error bodies. Chat request n (counting from 0) gets
behaviour n % 3: a good answer, HTTP 500 with the echo in its message, or HTTP 200 as
text/html quoting the echo (a wrong content type).

Under a mode prefix the echo changes (the base URL is then `http://127.0.0.1:PORT/MODE`):
- `/escaped`: the echo JSON-escaped as some servers write it: `/` as `\\/`, every other
  character as `\\uXXXX`. In JSON bodies it is the escaped spelling of the string (a client
  that parses them reads the plain echo); in text that is not JSON (the 500's plain-text
  body, the HTML page, /metrics) the escaped text itself, as a server quoting its own JSON.
- `/partial`: only the start of each credential: the key's first 20 characters, the
  password's first 12, the basic-auth token's first 16 ("invalid key sk-abc...").

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


MODES = ("escaped", "partial")
PLACEHOLDER = "@@echo@@"
"""Stands for the echo in a JSON body of the escaped mode until the body is text."""


def mode_of(request: web.Request) -> str:
    """The echo mode of a request: its path's first part when that is a mode, else ""."""
    first = request.path.split("/")[1]
    return first if first in MODES else ""


def echo(request: web.Request) -> str:
    """What the client sent to authenticate, as plainly as the server can see it (in the
    partial mode, the start of each credential only)."""
    header = request.headers.get("Authorization", "")
    kind, _, token = header.partition(" ")
    partial = mode_of(request) == "partial"
    if kind.lower() == "basic":
        try:
            user_password = base64.b64decode(token).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return header
        if partial:
            user, _, password = user_password.partition(":")
            return f"{kind} {token[:16]}... {user}:{password[:12]}..."
        return f"{header} {user_password}"
    if partial:
        return f"{kind} {token[:20]}..."
    return f"{header} {token}"


def escaped(text: str) -> str:
    """`text` JSON-escaped the way some servers write it: `/` as `\\/`, every other
    character as `\\uXXXX`."""
    out = []
    for index, char in enumerate(text):
        if char == "/":
            out.append("\\/")
        elif char in '"\\' or index % 2:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def said_in_text(request: web.Request) -> str:
    """The echo for a body that is not JSON: escaped text itself in the escaped mode."""
    said = echo(request)
    return escaped(said) if mode_of(request) == "escaped" else said


def said_in_json(request: web.Request) -> str:
    """The echo for a JSON body: a placeholder in the escaped mode (see `json_body`)."""
    return PLACEHOLDER if mode_of(request) == "escaped" else echo(request)


def json_body(request: web.Request, doc: object, status: int = 200) -> web.Response:
    """A JSON response; in the escaped mode every placeholder becomes the escaped echo (the
    body stays JSON, and decodes to the plain echo)."""
    text = json.dumps(doc).replace(PLACEHOLDER, escaped(echo(request)))
    return web.Response(text=text, status=status, content_type="application/json")


def chunk(
    request: web.Request, delta: dict[str, object], done: int, finish: str | None = None
) -> bytes:
    """One SSE event of a chat.completion.chunk with usage."""
    body = {
        "id": "echo",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": {"prompt_tokens": 4, "completion_tokens": done, "total_tokens": 4 + done},
    }
    text = json.dumps(body).replace(PLACEHOLDER, escaped(echo(request)))
    return b"data: " + text.encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    """A chat answer that echoes the credentials (good, 500 or wrong content type in turn)."""
    body = await request.json()
    said = said_in_json(request)
    kind = next(COUNTER) % 3
    if kind == 1:
        if mode_of(request) == "escaped":  # its own JSON, quoted in a plain-text body
            text = f'upstream said {{"error": "invalid credentials {said_in_text(request)}"}}'
            return web.Response(text=text, status=500, content_type="text/plain")
        message = f"invalid credentials {said}"
        return json_body(request, {"error": {"message": message, "code": 500}}, status=500)
    if kind == 2:
        return web.Response(text=f"<html>{said_in_text(request)}</html>",
                            content_type="text/html")  # fmt: skip
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
        return json_body(request, {
            "id": "echo",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": said}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
        })  # fmt: skip
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    half = len(content) // 2
    await resp.write(chunk(request, {"reasoning": said}, 1))
    await resp.write(chunk(request, {"content": content[:half]}, 2))
    await resp.write(chunk(request, {"content": content[half:]}, 3))
    await resp.write(chunk(request, {"content": f" and again {said}"}, 4, finish="length"))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def models(request: web.Request) -> web.Response:
    """The one model, named after the credentials."""
    said = said_in_json(request)
    entry = {"id": f"echo {said}", "root": said, "owned_by": said, "max_model_len": 2048}
    return json_body(request, {"object": "list", "data": [entry]})


async def version(request: web.Request) -> web.Response:
    """A version string holding the credentials (and a newline)."""
    return json_body(request, {"version": f"0.0.echo\n{said_in_json(request)}"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text with the credentials in a comment and a label."""
    said = said_in_text(request).replace('"', "'")
    text = (
        f"# HELP vllm:num_requests_running {said}\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="{said}"}} 0\n'
    )
    return web.Response(text=text, content_type="text/plain")


async def tokenize(request: web.Request) -> web.Response:
    """No /tokenize, saying so with the credentials."""
    message = f"no tokenizer for {said_in_json(request)}"
    return json_body(request, {"error": {"message": message}}, status=404)


async def health(request: web.Request) -> web.Response:
    """Healthy."""
    return web.Response(text="")


def main() -> None:
    """Serve on 127.0.0.1:PORT."""
    app = web.Application()
    for prefix in ("", *(f"/{mode}" for mode in MODES)):
        app.router.add_post(f"{prefix}/v1/chat/completions", chat)
        app.router.add_get(f"{prefix}/v1/models", models)
        app.router.add_get(f"{prefix}/version", version)
        app.router.add_get(f"{prefix}/metrics", metrics)
        app.router.add_post(f"{prefix}/tokenize", tokenize)
        app.router.add_get(f"{prefix}/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
