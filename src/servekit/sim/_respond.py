"""The HTTP edges of the live simulator (shell).

Reads request bodies (size limit, UTF-8, JSON, valid Unicode) and turns the engine's
deliveries into answers: server-sent event streams or whole JSON bodies.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass

from aiohttp import web
from pydantic import JsonValue

from servekit.sim import _openai as wire
from servekit.sim._live_engine import Ticket
from servekit.sim.textgen import PLAIN_TEXT, Answer, Segment, TokenText

MAX_BODY_BYTES = 16 * 1024**2
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class HttpError(Exception):
    """An error answer: HTTP status and vLLM-shaped body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = wire.error_body(message, kind=kind, code=status, param=param)


def _has_lone_surrogate(document: object) -> bool:
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


async def read_body(request: web.Request) -> bytes:
    """The request's body, read once (aiohttp keeps it for later reads).

    Raises:
        HttpError: 413 over MAX_BODY_BYTES (the app's client_max_size).
    """
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise HttpError(
            413,
            f"the request body is over the simulator's {MAX_BODY_BYTES // 1024**2} MiB limit; "
            "send a shorter prompt",
        ) from None


async def read_json(request: web.Request) -> object:
    """The request's JSON body.

    Raises:
        HttpError: 413 over MAX_BODY_BYTES (the app's client_max_size); 400 for a body that
            is not UTF-8, not JSON, or holds a lone UTF-16 surrogate (`"\\ud800"`), which no
            tokenizer can encode.
    """
    raw = await read_body(request)
    try:
        text = raw.decode(request.charset or "utf-8")
    except (UnicodeDecodeError, LookupError) as exc:
        raise HttpError(400, f"the request body is not valid UTF-8 text: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HttpError(400, f"the request body is not valid JSON: {exc}") from None
    # Only a \uD800-\uDFFF escape can smuggle a surrogate in, so most bodies skip the check.
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(document):
        raise HttpError(
            400,
            "the request body contains a lone UTF-16 surrogate escape (e.g. \\ud800), which is "
            "not valid Unicode; send valid UTF-8 text",
        )
    return document


def engine_dead() -> HttpError:
    """The 500 answer of a server whose engine crashed."""
    message = (
        "EngineCore encountered a fatal error: CUDA error: an illegal memory access was encountered"
    )
    return HttpError(500, message, kind="InternalServerError")


@dataclass(frozen=True, slots=True)
class Reply:
    """What a reply needs besides the engine's deliveries."""

    model: str
    prompt_tokens: int
    answer: Answer
    chat: bool
    # --enable-prompt-tokens-details: the engine's KV block size when its prefix cache is
    # on, 0 when it is off; None without the flag (no prompt_tokens_details then)
    details_block: int | None = None
    # the request's return_token_ids: its prompt's ids (chunks then carry their tokens' ids)
    prompt_ids: tuple[int, ...] | None = None
    # a reasoning or tool-call parser is on: as vLLM's, it sends no chat chunk for a step
    # whose tokens decode to nothing (unless token ids are asked for)
    parsers: bool = False
    text: TokenText = PLAIN_TEXT  # how the answer's tokens decode

    def prompt_details(self, ticket: Ticket) -> dict[str, JsonValue] | None:
        """The final usage's `prompt_tokens_details` for the ticket's (admitted) request:
        the prompt tokens its prefix cache served at admission, and those it then wrote
        (the prompt's full blocks past the hit), as vLLM reports them."""
        block = self.details_block
        if block is None:
            return None
        request = ticket.request
        hit = request.hit_tokens if request is not None and request.hit_tokens else 0
        created = max(0, self.prompt_tokens // block * block - hit) if block else 0
        return wire.prompt_tokens_details(hit, created, chat=self.chat)


def _abort(request: web.Request) -> None:
    """Cut the connection mid-body: the client sees an incomplete chunked response."""
    if request.transport is not None:
        request.transport.abort()


class _Chunks:
    """Builds the streamed chunks of one reply (chat or completions)."""

    def __init__(self, reply: Reply, ticket: Ticket, continuous_usage: bool) -> None:
        self.reply = reply
        self.ticket = ticket
        self.rid = ticket.id
        self.created = int(time.time())
        self.call_id = f"chatcmpl-tool-{uuid.uuid4().hex[:24]}"
        self.continuous_usage = continuous_usage
        self.sent_prompt_ids = False

    def _usage(self, done: int) -> dict[str, JsonValue] | None:
        return wire.usage(self.reply.prompt_tokens, done) if self.continuous_usage else None

    def role(self) -> bytes:
        """The chat stream's first event: the assistant role, no tokens yet (and the
        prompt's token ids when asked for)."""
        delta: dict[str, JsonValue] = {"role": "assistant", "content": ""}
        r = self.reply
        doc = wire.chat_chunk(self.rid, self.created, r.model, delta, usage_doc=self._usage(0))
        if r.prompt_ids is not None:
            doc["prompt_token_ids"] = list(r.prompt_ids)
        return wire.sse(doc)

    def step(self, segments: list[Segment], done: int, finish: str | None) -> bytes:
        """The one event of one engine step, whatever kinds of text it carries; nothing for
        a chat step a parser holds back (its tokens decoded to nothing, no token ids asked
        for, not the last step): the next event's usage counts its tokens."""
        r = self.reply
        ids: list[JsonValue] | None = None
        if r.prompt_ids is not None:
            ids = [i for segment in segments for i in segment.ids]
        if r.chat:
            if r.parsers and not r.text.plain:
                segments = [s for s in segments if s.text or s.kind == "tool"]
                if not segments and ids is None and finish is None:
                    return b""
            delta = wire.chat_delta(segments, call_id=self.call_id, tool_name=r.answer.tool_name)
            doc = wire.chat_chunk(
                self.rid, self.created, r.model, delta,
                finish_reason=finish, usage_doc=self._usage(done), token_ids=ids,
            )  # fmt: skip
        else:
            text = "".join(segment.text for segment in segments)
            doc = wire.completion_chunk(
                self.rid, self.created, r.model, text,
                finish_reason=finish, usage_doc=self._usage(done), token_ids=ids,
                prompt_token_ids=self._first_prompt_ids(),
            )  # fmt: skip
        return wire.sse(doc)

    def _first_prompt_ids(self) -> list[JsonValue] | None:
        """The prompt's ids on a completion stream's first chunk (token ids asked for)."""
        ids = self.reply.prompt_ids
        if ids is None or self.sent_prompt_ids:
            return None
        self.sent_prompt_ids = True
        return list(ids)

    def final_usage(self, done: int) -> bytes:
        """The usage-only chunk after the last step (empty choices)."""
        r = self.reply
        make = wire.chat_chunk if r.chat else wire.completion_chunk
        total = wire.usage(r.prompt_tokens, done, r.prompt_details(self.ticket))
        return wire.sse(make(self.rid, self.created, r.model, None, usage_doc=total))


async def stream_reply(
    request: web.Request,
    reply: Reply,
    ticket: Ticket,
    options: wire.StreamOptions | None,
    cut_at: int | None,
) -> web.StreamResponse:
    """Stream a reply as server-sent events, one event per engine step.

    Like vLLM, the chat role chunk goes out with the first engine output (in the same write),
    so the first event marks the real time to first token. Usage follows vLLM's
    `stream_options` rule (`wire.usage_flags`). The connection is cut without `[DONE]` when
    the engine crashes or at `cut_at` tokens.
    """
    include_usage, continuous_usage = wire.usage_flags(options)
    chunks = _Chunks(reply, ticket, continuous_usage)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    reader = reply.answer.reader(reply.text)
    ids = reply.prompt_ids is not None
    head = chunks.role() if reply.chat else b""
    try:
        while True:
            if cut_at is not None and reader.delivered >= cut_at:
                _abort(request)
                return response
            item = await ticket.queue.get()
            if item.crashed:
                _abort(request)
                return response
            segments = reader.take(item.tokens, garbage=ticket.corrupted, ids=ids)
            finish = reply.answer.finish_reason if item.finished else None
            event = chunks.step(segments, reader.delivered, finish)
            if event or head:  # the role chunk goes with the first output, held or not
                await response.write(head + event)
                head = b""
            if item.finished:
                break
        tail = chunks.final_usage(reader.delivered) if include_usage else b""
        await response.write(tail + wire.SSE_DONE)
        await response.write_eof()
        ticket.completed = True
    except ConnectionResetError:
        pass  # the client went away; the caller releases (aborts) its request
    return response


async def whole_reply(reply: Reply, ticket: Ticket) -> web.StreamResponse:
    """Wait for the whole answer and return it as one JSON body.

    Raises:
        HttpError: the engine crashed (500).
    """
    answer, chat, model, prompt_tokens = reply.answer, reply.chat, reply.model, reply.prompt_tokens
    texts: dict[str, list[str]] = {}
    reader = answer.reader(reply.text)
    while True:
        item = await ticket.queue.get()
        if item.crashed:
            raise engine_dead()
        for segment in reader.take(item.tokens, garbage=ticket.corrupted):
            texts.setdefault(segment.kind, []).append(segment.text)
        if item.finished:
            break
    joined = {kind: "".join(parts) for kind, parts in texts.items()}
    usage_doc = wire.usage(prompt_tokens, reader.delivered, reply.prompt_details(ticket))
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
