"""A loopback server that misbehaves on purpose, one way per mode (run as a script by the tests).

Every mode lives under its own prefix, so one server serves them all: the base URL
`http://127.0.0.1:PORT/m/MODE` answers /health, /version, /v1/models, /tokenize, /metrics
and /v1/chat/completions (and /v1/completions) like a small, well-behaved vLLM, except for
the one thing MODE breaks (`MODES` lists them with what they do). A good stream carries
`OUTPUT` content chunks of one token each, with vLLM's continuous usage, then `[DONE]`.

Usage: python hostile_server.py PORT
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from aiohttp import web

OUTPUT = 4
STALL_S = 3600.0  # "forever" for a test: the client's deadline must cut it first
MODEL = "hostile"
MAX_MODEL_LEN = 4096

MODES: dict[str, str] = {
    "ok": "a well-behaved server (the baseline)",
    "invalid_json": "every stream's first event is not JSON",
    "html": "a 200 HTML page instead of a stream (a proxy's login page)",
    "endless_line": "a stream whose first line never ends (bytes forever, no newline)",
    "stall_after_first": "one chunk, then silence with the connection open",
    "huge_lines": "a 10 MB data line (complete, with its blank line)",
    "usage_nan": "usage counts written as NaN (not JSON)",
    "usage_negative": "usage counts below zero",
    "usage_bool": "usage counts that are booleans",
    "usage_huge": "a usage count of 10^15 tokens",
    "usage_contradictory": "usage that falls from chunk to chunk, below what streamed",
    "duplicate_done": "[DONE] twice, then chunks after it",
    "missing_done": "the stream ends without [DONE]",
    "broken_tool_json": "a tool call whose arguments are cut-off JSON",
    "wrong_content_type": "an SSE body labelled text/plain",
    "http_429": "429 with Retry-After on every completion",
    "http_503": "503 with Retry-After on every completion",
    "slowloris": "the response headers dribble out a byte at a time",
    "reset_headers": "the connection is reset half-way through the response headers",
    "metrics_nan": "/metrics with NaN gauges and counters",
    "metrics_utf8": "/metrics holding invalid UTF-8",
    "stall_tokenize": "/tokenize never answers",
    "echo_credentials": "the Authorization header is echoed into bodies and errors",
    "dead": "/health fails and every completion is a 500 from the start",
}
"""Every mode and what it does."""

STREAM_MODES = frozenset(
    {"invalid_json", "endless_line", "stall_after_first", "huge_lines", "usage_nan",
     "usage_negative", "usage_bool", "usage_huge", "usage_contradictory", "duplicate_done",
     "missing_done", "broken_tool_json"}
)  # fmt: skip
"""Modes that only break streams: a non-streaming chat answers normally in them."""


def _usage(mode: str, done: int) -> str:
    """The usage object of the chunk after `done` tokens, as JSON text (NaN is not JSON)."""
    prompt, completion = 8, done
    if mode == "usage_nan":
        return '{"prompt_tokens": NaN, "completion_tokens": NaN, "total_tokens": NaN}'
    if mode == "usage_negative":
        prompt, completion = -20, -8 * done
    elif mode == "usage_huge":
        completion = 10**15
    elif mode == "usage_contradictory":
        completion = OUTPUT - done  # falls, and ends below the chunks that streamed
    if mode == "usage_bool":
        return json.dumps({"prompt_tokens": True, "completion_tokens": True, "total_tokens": True})
    return json.dumps(
        {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + done}
    )


def _chunk(mode: str, delta: dict[str, Any], done: int, finish: str | None = None) -> bytes:
    choice = json.dumps({"index": 0, "delta": delta, "finish_reason": finish})
    body = (
        f'{{"id": "h", "object": "chat.completion.chunk", "model": "{MODEL}", '
        f'"choices": [{choice}], "usage": {_usage(mode, done)}}}'
    )
    return b"data: " + body.encode() + b"\n\n"


def _auth(request: web.Request) -> str:
    return request.headers.get("Authorization", "")


def _text(mode: str, request: web.Request, done: int) -> str:
    if mode == "echo_credentials":
        return f" echo {_auth(request)}"
    return f" {WORDS[done % len(WORDS)]}"


WORDS = ("The", "answer", "is", "four", "and", "that", "is", "all")


def _prompt_words(body: dict[str, Any]) -> int:
    """The prompt's length in words (this server's tokens), template tokens included."""
    if "messages" in body:
        text = " ".join(str(m.get("content") or "") for m in body["messages"])
        return len(text.split()) + 3
    return len(str(body.get("prompt", "")).split())


def _too_long(body: dict[str, Any]) -> web.Response | None:
    """vLLM's 400 for a prompt over max_model_len."""
    count = _prompt_words(body)
    if count + int(body.get("max_tokens") or 0) <= MAX_MODEL_LEN:
        return None
    message = (
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you "
        f"requested {count} tokens in the messages. Please reduce the length of the messages."
    )
    return web.json_response(
        {"object": "error", "message": message, "type": "BadRequestError", "code": 400},
        status=400,
    )


async def _raw_response(request: web.Request, mode: str) -> web.StreamResponse:
    """Write below aiohttp's response: headers a byte at a time, or cut mid-headers."""
    transport = request.transport
    assert transport is not None
    if mode == "reset_headers":
        transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-str")
        await asyncio.sleep(0.05)
        transport.abort()  # a reset, not a clean close
    else:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n":
            transport.write(bytes([byte]))
            await asyncio.sleep(0.5)
            if transport.is_closing():
                break
        transport.abort()
    raise asyncio.CancelledError  # the connection is gone: aiohttp writes nothing more


async def _status(request: web.Request, mode: str) -> web.StreamResponse | None:
    """The non-stream answers of the modes that refuse or mislabel completions."""
    if mode in ("http_429", "http_503"):
        status = int(mode[-3:])
        return web.json_response(
            {"error": {"message": f"busy ({status})", "code": status}},
            status=status,
            headers={"Retry-After": "1"},
        )
    if mode == "dead":
        return web.json_response({"error": {"message": "EngineDeadError"}}, status=500)
    if mode == "html":
        return web.Response(
            text="<html><body>Please log in</body></html>", content_type="text/html"
        )
    if mode in ("slowloris", "reset_headers"):
        return await _raw_response(request, mode)
    return None


async def chat(request: web.Request) -> web.StreamResponse:
    """A chat (or completions) request, streamed or not, broken as the mode says."""
    mode = request.match_info["mode"]
    body = await request.json()
    refused = await _status(request, mode)
    if refused is not None:
        return refused
    if (too_long := _too_long(body)) is not None:
        return too_long
    if not body.get("stream"):
        return web.json_response(_whole_answer(mode, request, body))
    content_type = "text/plain" if mode == "wrong_content_type" else "text/event-stream"
    resp = web.StreamResponse(headers={"Content-Type": content_type})
    await resp.prepare(request)
    if mode == "endless_line":
        await resp.write(b"data: ")
        while True:
            await resp.write(b"x" * 65536)
            await asyncio.sleep(0.001)
    if mode == "invalid_json":
        await resp.write(b"data: {not json\n\n")
    if mode == "huge_lines":
        await resp.write(b'data: {"pad": "' + b"y" * (10 * 1024 * 1024) + b'"}\n\n')
    if mode == "broken_tool_json" or _wants_tool(body):
        name, arguments = _tool_call(mode, body)
        call = {"index": 0, "id": "c1", "type": "function",
                "function": {"name": name, "arguments": arguments}}  # fmt: skip
        await resp.write(_chunk(mode, {"tool_calls": [call]}, 1, "tool_calls"))
        await resp.write(b"data: [DONE]\n\n")
        return resp
    for done in range(1, OUTPUT + 1):
        finish = "length" if done == OUTPUT else None
        await resp.write(_chunk(mode, {"content": _text(mode, request, done)}, done, finish))
        if mode == "stall_after_first":
            await asyncio.sleep(STALL_S)
    if mode != "missing_done":
        await resp.write(b"data: [DONE]\n\n")
    if mode == "duplicate_done":
        await resp.write(b"data: [DONE]\n\n")
        await resp.write(_chunk(mode, {"content": " late"}, OUTPUT + 1))
    return resp


def _wants_tool(body: dict[str, Any]) -> bool:
    """Tools offered and no tool result yet: answer with a call."""
    messages = body.get("messages") or []
    return bool(body.get("tools")) and not any(m.get("role") == "tool" for m in messages)


def _tool_call(mode: str, body: dict[str, Any]) -> tuple[str, str]:
    """The call made: the first tool offered, with cut-off arguments in broken_tool_json."""
    tools = body.get("tools") or [{"function": {"name": "get_weather"}}]
    name = str(tools[0]["function"]["name"])
    return name, '{"city": "Par' if mode == "broken_tool_json" else '{"city": "Paris"}'


def _whole_answer(mode: str, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming answer: the same text (and tokens) a stream carries, or a tool call."""
    text = "".join(_text(mode, request, done) for done in range(1, OUTPUT + 1))
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish = "length"
    if mode == "broken_tool_json" or _wants_tool(body):
        name, arguments = _tool_call(mode, body)
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
        ]}  # fmt: skip
        finish = "tool_calls"
    return {
        "id": "h",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 8, "completion_tokens": OUTPUT, "total_tokens": 8 + OUTPUT},
    }


async def health(request: web.Request) -> web.Response:
    """/health: 200, except for a dead server."""
    return web.Response(status=503 if request.match_info["mode"] == "dead" else 200)


async def version(request: web.Request) -> web.Response:
    """/version, echoing credentials in that mode."""
    mode = request.match_info["mode"]
    text = f"0.0-hostile {_auth(request)}" if mode == "echo_credentials" else "0.0-hostile"
    return web.json_response({"version": text})


async def models(request: web.Request) -> web.Response:
    """/v1/models: one model with a 4096-token context."""
    entry: dict[str, Any] = {"id": MODEL, "object": "model", "max_model_len": MAX_MODEL_LEN}
    if request.match_info["mode"] == "echo_credentials":
        entry["owned_by"] = _auth(request)
    return web.json_response({"object": "list", "data": [entry]})


async def tokenize(request: web.Request) -> web.Response:
    """/tokenize: one token per word (and a few for the chat template); or a stall."""
    if request.match_info["mode"] == "stall_tokenize":
        await asyncio.sleep(STALL_S)
    body = await request.json()
    return web.json_response(
        {"count": _prompt_words(body), "max_model_len": MAX_MODEL_LEN, "tokens": []}
    )


METRICS_OK = b"""# HELP vllm:num_requests_running Running requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="hostile"} 0.0
# HELP vllm:generation_tokens_total Generated tokens.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="hostile"} 0.0
"""


async def metrics(request: web.Request) -> web.Response:
    """/metrics: Prometheus text, broken with NaN or invalid UTF-8 in those modes."""
    mode = request.match_info["mode"]
    text = METRICS_OK
    if mode == "metrics_nan":
        text = text.replace(b" 0.0\n", b" NaN\n") + (
            b"# TYPE vllm:num_preemptions_total counter\n"
            b'vllm:num_preemptions_total{model_name="hostile"} NaN\n'
            b"# TYPE vllm:kv_cache_usage_perc gauge\n"
            b'vllm:kv_cache_usage_perc{model_name="hostile"} +Inf\n'
        )
    elif mode == "metrics_utf8":
        text = text.replace(b'"hostile"', b'"\xff\xfe\xc3("') + b"\xff\xff garbage \x80\n"
    return web.Response(body=text, content_type="text/plain")


def build_app() -> web.Application:
    """The app: every route under `/m/{mode}`."""
    app = web.Application()
    prefix = "/m/{mode}"
    app.router.add_get(f"{prefix}/health", health)
    app.router.add_get(f"{prefix}/version", version)
    app.router.add_get(f"{prefix}/v1/models", models)
    app.router.add_get(f"{prefix}/metrics", metrics)
    app.router.add_post(f"{prefix}/tokenize", tokenize)
    app.router.add_post(f"{prefix}/v1/chat/completions", chat)
    app.router.add_post(f"{prefix}/v1/completions", chat)
    return app


def main() -> None:
    logging.disable(logging.CRITICAL)  # aborted connections are the point, not news
    web.run_app(
        build_app(), host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None,
        shutdown_timeout=0.2,  # stalled handlers are the point: do not wait for them
    )  # fmt: skip


if __name__ == "__main__":
    main()
