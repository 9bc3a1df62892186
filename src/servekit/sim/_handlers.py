"""Request handlers of the live simulator (shell): one `SimServer` per application.

Parses requests at the edge, plans each answer with `textgen`, submits it to the
`LiveEngine` and turns its deliveries into vLLM-shaped JSON or server-sent events.
Errors become vLLM's error bodies; a client never sees a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, JsonValue, ValidationError

from servekit import __version__
from servekit.errors import SimulationError
from servekit.profiles.schema import Profile
from servekit.sim import _openai as wire
from servekit.sim._live_engine import LiveEngine
from servekit.sim._metrics import CONTENT_TYPE, ServerMetrics
from servekit.sim._respond import (
    HttpError,
    Reply,
    engine_dead,
    read_json,
    stream_reply,
    whole_reply,
)
from servekit.sim.build import build_engine
from servekit.sim.chat import ToolSpec, choose_tool, render_chat, thinking_enabled
from servekit.sim.faults import Faults
from servekit.sim.textgen import (
    PLAIN_TEXT,
    Answer,
    AnswerRequest,
    TokenText,
    iter_answer_token_ids,
    plan_answer,
)
from servekit.sim.tokenizer import detokenize, iter_pieces, token_id

DEFAULT_MAX_TOKENS = 256
# Seconds in-flight requests get to finish when the server shuts down; then they are cut.
SHUTDOWN_GRACE_S = 1.5
# A prompt longer than this many characters per token of max_model_len cannot fit, so it
# is refused before tokenizing (real tokenizers average 3-5 characters per token).
MAX_CHARS_PER_TOKEN = 32
_KNOWN_PIECES_MAX = 200_000
_YIELD_EVERY = 16_384  # pieces tokenized between yields to the event loop
ModelT = TypeVar("ModelT", bound=BaseModel)
Log = Callable[[str], None]


def log_to_stderr(line: str) -> None:
    """Write one server log line to stderr."""
    print(line, file=sys.stderr, flush=True)


def _bad_request(message: str, param: str | None = None) -> HttpError:
    return HttpError(400, message, param=param)


async def _token_ids(text: str) -> list[int]:
    """A text's token ids, letting other tasks run now and then on long texts."""
    ids = []
    known: dict[str, int] = {}  # prompts repeat pieces: hash each distinct one once
    for count, piece in enumerate(iter_pieces(text), start=1):
        ident = known.get(piece)
        if ident is None:
            ident = known[piece] = token_id(piece)
        ids.append(ident)
        if count % _YIELD_EVERY == 0:
            await asyncio.sleep(0)
    return ids


class SimServer:
    """Request handlers and state of one simulated server."""

    def __init__(
        self,
        profile: Profile,
        *,
        seed: int,
        time_scale: float,
        faults: Faults,
        log: Log,
        shutdown_grace_s: float = SHUTDOWN_GRACE_S,
        enable_prompt_tokens_details: bool = False,
        token_text: TokenText = PLAIN_TEXT,
    ) -> None:
        self.profile = profile
        self.token_text = token_text
        args = profile.serve_args
        self.parsers = bool(args.reasoning_parser or args.tool_call_parser)
        self.engine = build_engine(profile, seed=seed)
        # vLLM's --enable-prompt-tokens-details: usage reports the prefix cache's hits
        self.details_block = (
            (self.engine.model.block_size if self.engine.pool.caching else 0)
            if enable_prompt_tokens_details
            else None
        )
        self.model_name = profile.serve_args.served_model_name or profile.model.path
        self.max_model_len = self.engine.model.max_model_len
        self.metrics = ServerMetrics(self.engine, self.model_name)
        self.live = LiveEngine(
            self.engine, time_scale=time_scale, faults=faults, metrics=self.metrics, log=log
        )
        self.time_scale = time_scale
        self.faults = faults
        self.log = log
        self.ready_at = 0.0
        # Seeded, reproducible draws for simulation, never for security.
        self._seeds = random.Random(seed)
        self._drops = random.Random(seed ^ 0x5EED)
        self._known: dict[int, str] = {}
        self._inflight: set[asyncio.Task[object]] = set()
        self._grace_s = shutdown_grace_s

    # ---- plumbing ------------------------------------------------------------------------

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        """Start the engine driver with the app and stop it on cleanup."""
        self.ready_at = asyncio.get_running_loop().time() + self.faults.warmup_s * self.time_scale
        driver = asyncio.create_task(self.live.run())
        yield
        driver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await driver

    async def shutdown(self, app: web.Application) -> None:
        """On shutdown: let in-flight requests finish for a grace period, then cut them.

        Cancelling a handler aborts its request in the engine and closes its connection, so
        shutdown takes at most the grace period however long the open answers are.
        """
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=self._grace_s)
        for task in self._inflight:
            task.cancel()
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=self._grace_s)

    @web.middleware
    async def tracked(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Remember each request's task while it runs, for `shutdown`."""
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - aiohttp always runs handlers in a task
            return await handler(request)
        self._inflight.add(task)
        try:
            return await handler(request)
        finally:
            self._inflight.discard(task)

    @web.middleware
    async def errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Turn errors into vLLM-shaped JSON; never send a traceback to the client."""
        try:
            return await handler(request)
        except HttpError as exc:
            return web.json_response(exc.body, status=exc.status)
        except web.HTTPException:
            raise
        except Exception as exc:
            for line in traceback.format_exc().splitlines():
                self.log(line)
            message = f"internal error in the simulator: {exc}"
            error = HttpError(500, message, kind="InternalServerError")
            return web.json_response(error.body, status=500)

    async def _parse(self, request: web.Request, model: type[ModelT]) -> ModelT:
        body = await read_json(request)
        try:
            parsed = model.model_validate(body)
        except ValidationError as exc:
            raise _bad_request(wire.describe_validation_error(exc)) from None
        name = getattr(parsed, "model", None)
        if name is not None and name != self.model_name:
            message = f"The model `{name}` does not exist."
            raise HttpError(404, message, kind="NotFoundError", param="model")
        return parsed

    def _check_serving(self) -> None:
        if self.live.crashed:
            raise engine_dead()
        if asyncio.get_running_loop().time() < self.ready_at:
            message = "the server is still starting"
            raise HttpError(503, message, kind="ServiceUnavailableError")

    async def _prompt_ids(self, text: str) -> list[int]:
        """The prompt's token ids, refusing prompts that are empty or far too long.

        Raises:
            HttpError: 400 for an empty prompt (vLLM refuses them too) or one with more
                characters than max_model_len tokens could hold.
        """
        bound = self.max_model_len * MAX_CHARS_PER_TOKEN
        if len(text) > bound:
            raise _bad_request(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"your request has {len(text)} characters of input, more than {bound} "
                f"({MAX_CHARS_PER_TOKEN} per token) can hold. Please reduce the length of the "
                "input messages."
            )
        ids = await _token_ids(text)
        if not ids:
            raise _bad_request("The decoder prompt cannot be empty", param="prompt")
        return ids

    # ---- generation ----------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """`POST /v1/chat/completions`."""
        req = await self._parse(request, wire.ChatRequest)
        self._check_serving()
        args = self.profile.serve_args
        messages = [m.to_message() for m in req.messages]
        tools = [t.to_spec() for t in req.tools or ()]
        if tools and req.tool_choice in (None, "auto") and not args.enable_auto_tool_choice:
            raise _bad_request(
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set"
            )
        try:
            tool = choose_tool(tools, req.tool_choice_name, messages)
        except SimulationError as exc:
            raise _bad_request(exc.message) from None
        prompt = render_chat(messages, tools)
        thinking = thinking_enabled(
            args.reasoning_parser, args.default_chat_template_kwargs, req.chat_template_kwargs
        )
        prompt_ids = await self._prompt_ids(prompt)
        answer = self._plan(prompt, len(prompt_ids), req, req.output_limit, thinking, tool)
        return await self._respond(request, req, prompt_ids, answer, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """`POST /v1/completions`."""
        req = await self._parse(request, wire.CompletionRequest)
        self._check_serving()
        if isinstance(req.prompt, str):
            prompt = req.prompt
            prompt_ids = await self._prompt_ids(prompt)
        elif all(isinstance(p, int) for p in req.prompt):
            # Token ids as given: the engine caches them as they are.
            prompt_ids = [p for p in req.prompt if isinstance(p, int)]
            prompt = " ".join(map(str, prompt_ids))
        else:
            prompt = str(req.prompt[0])
            prompt_ids = await self._prompt_ids(prompt)
        answer = self._plan(prompt, len(prompt_ids), req, req.max_tokens, False, None)
        return await self._respond(request, req, prompt_ids, answer, chat=False)

    def _plan(
        self,
        prompt: str,
        prompt_tokens: int,
        req: wire.ChatRequest | wire.CompletionRequest,
        limit: int | None,
        thinking: bool,
        tool: ToolSpec | None,
    ) -> Answer:
        if limit is not None and req.min_tokens > limit:
            raise _bad_request(
                f"min_tokens ({req.min_tokens}) must be less than or equal to max_tokens ({limit})"
            )
        if prompt_tokens + (limit or 1) > self.max_model_len:
            message = wire.context_length_message(self.max_model_len, prompt_tokens, limit)
            raise _bad_request(message)
        seed = req.seed if req.seed is not None else self._seeds.getrandbits(63)
        return plan_answer(
            AnswerRequest(
                prompt=prompt,
                max_tokens=limit,
                context_left=self.max_model_len - prompt_tokens,
                default_tokens=DEFAULT_MAX_TOKENS,
                min_tokens=req.min_tokens,
                temperature=req.temperature,
                seed=seed,
                thinking=thinking,
                tool=tool,
                ignore_eos=req.ignore_eos,
            )
        )

    async def _respond(
        self,
        request: web.Request,
        req: wire.ChatRequest | wire.CompletionRequest,
        prompt_ids: list[int],
        answer: Answer,
        *,
        chat: bool,
    ) -> web.StreamResponse:
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        prompt_tokens = len(prompt_ids)
        ticket = self.live.submit(
            rid,
            prompt_tokens,
            answer.tokens,
            req.temperature,
            token_ids=prompt_ids,
            output_ids=iter_answer_token_ids(answer),
        )
        try:
            reply = Reply(
                self.model_name, prompt_tokens, answer, chat, self.details_block,
                prompt_ids=tuple(prompt_ids) if req.return_token_ids else None,
                parsers=self.parsers, text=self.token_text,
            )  # fmt: skip
            if req.stream:
                cut_at = self._cut_point(answer.tokens)
                return await stream_reply(request, reply, ticket, req.stream_options, cut_at)
            response = await whole_reply(reply, ticket)
            ticket.completed = True
            return response
        finally:
            if ticket.completed:
                self.metrics.observe_success(answer.finish_reason)
            self.live.release(rid)

    def _cut_point(self, tokens: int) -> int | None:
        p = self.faults.drop_stream_p
        if p <= 0 or self._drops.random() >= p:
            return None
        return self._drops.randrange(max(tokens, 1))

    # ---- everything else -----------------------------------------------------------------

    async def health(self, request: web.Request) -> web.StreamResponse:
        """`GET /health`: 200 when ready, 503 while starting or once the engine is dead."""
        try:
            self._check_serving()
        except HttpError as exc:
            error = HttpError(503, exc.message, kind="ServiceUnavailableError")
            return web.json_response(error.body, status=503)
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.StreamResponse:
        """`GET /v1/models`."""
        card: dict[str, JsonValue] = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": self.profile.model.path,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def version(self, request: web.Request) -> web.StreamResponse:
        """`GET /version`."""
        return web.json_response({"version": f"servekit-sim {__version__}"})

    async def tokenize(self, request: web.Request) -> web.StreamResponse:
        """`POST /tokenize` with a prompt or chat messages (rendered as the chat endpoint does)."""
        req = await self._parse(request, wire.TokenizeRequest)
        if (req.prompt is None) == (req.messages is None):
            raise _bad_request('give exactly one of "prompt" or "messages"')
        if req.messages is not None:
            tools = [t.to_spec() for t in req.tools or ()]
            text = render_chat([m.to_message() for m in req.messages], tools)
        else:
            text = req.prompt or ""
        ids = []
        known = self._known
        for count, piece in enumerate(iter_pieces(text), start=1):
            ident = token_id(piece)
            ids.append(ident)
            # The cap holds per insertion, so no single request can grow the table past it.
            if ident not in known and len(known) < _KNOWN_PIECES_MAX:
                known[ident] = piece
            if count % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return web.json_response(
            {
                "count": len(ids),
                "max_model_len": self.max_model_len,
                "tokens": ids,
                "token_strs": None,
            }
        )

    async def detokenize(self, request: web.Request) -> web.StreamResponse:
        """`POST /detokenize`: ids this server generated or tokenized back to text."""
        req = await self._parse(request, wire.DetokenizeRequest)
        try:
            text = detokenize(req.tokens, self._known)
        except SimulationError as exc:
            raise _bad_request(str(exc)) from None
        return web.json_response(
            {"prompt": text}, dumps=lambda d: json.dumps(d, ensure_ascii=False)
        )

    async def metrics_text(self, request: web.Request) -> web.StreamResponse:
        """`GET /metrics` in the Prometheus text format."""
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})
