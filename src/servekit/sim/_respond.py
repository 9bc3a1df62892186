"""Engine deliveries to HTTP answers (shell): server-sent event streams and whole JSON bodies."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from aiohttp import web
from pydantic import JsonValue

from servekit.sim import _openai as wire
from servekit.sim._live_engine import Ticket
from servekit.sim.textgen import Answer


class HttpError(Exception):
    """An error answer: HTTP status and vLLM-shaped body."""

    def __init__(self, status: int, body: dict[str, JsonValue]) -> None:
        super().__init__(body.get("message"))
        self.status = status
        self.body = body


def engine_dead() -> HttpError:
    """The 500 answer of a server whose engine crashed."""
    message = (
        "EngineCore encountered a fatal error: CUDA error: an illegal memory access was encountered"
    )
    return HttpError(500, wire.error_body(message, kind="InternalServerError", code=500))


@dataclass(frozen=True, slots=True)
class Reply:
    """What a reply needs besides the engine's deliveries."""

    model: str
    prompt_tokens: int
    answer: Answer
    chat: bool


def _abort(request: web.Request) -> None:
    """Cut the connection mid-body: the client sees an incomplete chunked response."""
    if request.transport is not None:
        request.transport.abort()


async def stream_reply(
    request: web.Request,
    reply: Reply,
    ticket: Ticket,
    options: wire.StreamOptions,
    cut_at: int | None,
) -> web.StreamResponse:
    """Stream a reply as server-sent events, one event per kind of text in each delivery.

    The connection is cut without `[DONE]` when the engine crashes or at `cut_at` tokens.
    """
    answer, chat, model, prompt_tokens = reply.answer, reply.chat, reply.model, reply.prompt_tokens
    created = int(time.time())
    call_id = f"chatcmpl-tool-{uuid.uuid4().hex[:24]}"
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)

    def usage_now(done: int) -> dict[str, JsonValue] | None:
        return wire.usage(prompt_tokens, done) if options.continuous_usage_stats else None

    try:
        if chat:
            role: dict[str, JsonValue] = {"role": "assistant", "content": ""}
            first = wire.chat_chunk(ticket.id, created, model, role, usage_doc=usage_now(0))
            await response.write(wire.sse(first))
        delivered = 0
        while True:
            if cut_at is not None and delivered >= cut_at:
                _abort(request)
                return response
            item = await ticket.queue.get()
            if item.crashed:
                _abort(request)
                return response
            segments = answer.segments(delivered, item.tokens, garbage=ticket.corrupted)
            for index, segment in enumerate(segments):
                delivered += segment.tokens
                last = item.finished and index == len(segments) - 1
                finish = answer.finish_reason if last else None
                if chat:
                    delta = wire.chat_delta(segment, call_id=call_id, tool_name=answer.tool_name)
                    doc = wire.chat_chunk(
                        ticket.id,
                        created,
                        model,
                        delta,
                        finish_reason=finish,
                        usage_doc=usage_now(delivered),
                    )
                else:
                    doc = wire.completion_chunk(
                        ticket.id,
                        created,
                        model,
                        segment.text,
                        finish_reason=finish,
                        usage_doc=usage_now(delivered),
                    )
                await response.write(wire.sse(doc))
            if item.finished:
                break
        if options.include_usage:
            total = wire.usage(prompt_tokens, delivered)
            make = wire.chat_chunk if chat else wire.completion_chunk
            await response.write(wire.sse(make(ticket.id, created, model, None, usage_doc=total)))
        await response.write(wire.SSE_DONE)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client went away; its request runs out in the engine unseen
    return response


async def whole_reply(reply: Reply, ticket: Ticket) -> web.StreamResponse:
    """Wait for the whole answer and return it as one JSON body.

    Raises:
        HttpError: the engine crashed (500).
    """
    answer, chat, model, prompt_tokens = reply.answer, reply.chat, reply.model, reply.prompt_tokens
    texts: dict[str, list[str]] = {}
    delivered = 0
    while True:
        item = await ticket.queue.get()
        if item.crashed:
            raise engine_dead()
        for segment in answer.segments(delivered, item.tokens, garbage=ticket.corrupted):
            texts.setdefault(segment.kind, []).append(segment.text)
            delivered += segment.tokens
        if item.finished:
            break
    joined = {kind: "".join(parts) for kind, parts in texts.items()}
    usage_doc = wire.usage(prompt_tokens, delivered)
    created = int(time.time())
    if chat:
        body = wire.chat_completion(
            ticket.id,
            created,
            model,
            joined,
            tool_name=answer.tool_name,
            call_id=f"chatcmpl-tool-{uuid.uuid4().hex[:24]}",
            finish_reason=answer.finish_reason,
            usage_doc=usage_doc,
        )
    else:
        body = wire.text_completion(
            ticket.id,
            created,
            model,
            joined.get("content", ""),
            finish_reason=answer.finish_reason,
            usage_doc=usage_doc,
        )
    return web.json_response(body, dumps=lambda d: json.dumps(d, ensure_ascii=False))
