"""What every validate check shares (shell): the spec, the server's endpoint, the transcript,
the server facts learnt so far, and helpers that send one chat request and record it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit.bench.scrape import Snapshot
from servekit.client.endpoint import Endpoint
from servekit.client.http import JsonReply, TimedStream
from servekit.redaction import Redactor
from servekit.validate.transcript import Transcript

Status = str  # "pass" | "fail" | "warn" | "skip"
CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Outcome:
    """A check's verdict: status, a one-line detail, and optional data for --json."""

    status: Status
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ValidateSpec:
    """What to validate and how."""

    base_url: str
    model: str | None = None  # the served name expected in /v1/models (None: take the first)
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # holds the API key
    redactor: Redactor = field(default_factory=Redactor, repr=False)  # removed from results
    expected_max_model_len: int | None = None
    thinking_kwargs: dict[str, Any] | None = None  # chat_template_kwargs that turn thinking on
    thinking_expected: bool = False  # the profile or --thinking-kwargs says the model thinks
    ladder: tuple[int, ...] = (1, 2, 4, 8, 16)
    long_context_tokens: int | None = None
    log_file: Path | None = None
    reference_url: str | None = None
    # the reference server's Authorization header (None: the same headers as the server's)
    reference_headers: dict[str, str] | None = field(default=None, repr=False)
    only: frozenset[str] = frozenset()
    skip: frozenset[str] = frozenset()
    check_timeout_s: float = 180.0
    max_tokens: int = 48
    reasoning_max_tokens: int = 384


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    """A chat answer, streamed or not, reduced to what the checks compare."""

    content: str
    reasoning: str
    tool_calls: list[tuple[str, str, str | None]]  # (name, arguments, id)
    finish_reason: str | None
    completion_tokens: int | None
    prompt_tokens: int | None
    reasoning_field: str | None  # "reasoning" or the older "reasoning_content"
    error_kind: str | None = None
    error: str | None = None
    ttft_s: float | None = None


@dataclass
class Context:
    """Shared state of one validate run."""

    spec: ValidateSpec
    server: Endpoint  # spec.base_url with spec.headers
    transcript: Transcript
    model: str = ""
    max_model_len: int | None = None
    metrics_before: Snapshot | None = None
    references: dict[int, str] = field(default_factory=dict)  # ladder prompt -> greedy text
    tokenize_ok: bool = True  # False once /tokenize failed: it is not asked again
    check: str = ""  # the running check, for the transcript

    def body(self, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """A greedy chat request body for the served model."""
        return {"model": self.model, "messages": messages, "temperature": 0.0,
                "max_tokens": self.spec.max_tokens, **extra}  # fmt: skip

    async def get(self, path: str, timeout_s: float = 10.0) -> JsonReply:
        """GET a JSON endpoint and record it."""
        reply = await self.server.get_json(path, timeout_s=timeout_s)
        self.transcript.add(self.check, path, None, reply.status, reply.doc or reply.error)
        return reply

    async def chat(self, body: dict[str, Any]) -> ChatAnswer:
        """Send a non-streaming chat request and reduce the answer."""
        reply = await self.server.post_json(CHAT_PATH, body, timeout_s=self.spec.check_timeout_s)
        self.transcript.add(self.check, "/v1/chat/completions", body, reply.status,
                            reply.doc if reply.error_kind is None else reply.error)  # fmt: skip
        if reply.error_kind is not None:
            return _failed(reply.error_kind, reply.error or "")
        return answer_from_doc(reply.doc)

    async def chat_stream(self, body: dict[str, Any], at: Endpoint | None = None) -> ChatAnswer:
        """Send a streaming chat request (usage on the last chunk) to this server (or to
        `at`) and reduce the answer."""
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        server = at or self.server
        timed = await server.stream(CHAT_PATH, streamed, timeout_s=self.spec.check_timeout_s)
        answer = answer_from_stream(timed)
        self.transcript.add(self.check, "/v1/chat/completions (stream)", streamed, timed.status, {
            "content": answer.content, "reasoning": answer.reasoning,
            "tool_calls": answer.tool_calls, "finish_reason": answer.finish_reason,
            "error": answer.error,
        })  # fmt: skip
        return answer


def _failed(kind: str, message: str) -> ChatAnswer:
    return ChatAnswer("", "", [], None, None, None, None, kind, message)


def answer_from_doc(doc: Any) -> ChatAnswer:
    """Reduce a chat.completion document; a malformed one becomes a `malformed` failure."""
    try:
        choice = doc["choices"][0]
        message = choice["message"]
        usage = doc.get("usage") or {}
        field_name = next((f for f in ("reasoning", "reasoning_content") if message.get(f)), None)
        calls = [
            (str(c["function"]["name"]), str(c["function"].get("arguments") or ""), c.get("id"))
            for c in message.get("tool_calls") or []
        ]
        return ChatAnswer(
            content=message.get("content") or "",
            reasoning=str(message.get(field_name) or "") if field_name else "",
            tool_calls=calls,
            finish_reason=choice.get("finish_reason"),
            completion_tokens=usage.get("completion_tokens"),
            prompt_tokens=usage.get("prompt_tokens"),
            reasoning_field=field_name,
        )
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        return _failed(
            "malformed_response", f"the chat answer lacks {exc!s} ({type(exc).__name__})"
        )


def answer_from_stream(timed: TimedStream) -> ChatAnswer:
    """Reduce a timed stream."""
    r = timed.result
    if r.error_kind is not None:
        return _failed(r.error_kind, r.error or "")
    calls = [(c.name, c.arguments, c.id) for _, c in sorted(r.tool_calls.items())]
    ttft = (r.first_token_ns - timed.sent_ns) / 1e9 if r.first_token_ns is not None else None
    return ChatAnswer(
        r.text, r.reasoning_text, calls, r.finish_reason, r.completion_tokens, r.prompt_tokens,
        "reasoning" if r.reasoning else None, ttft_s=ttft,
    )  # fmt: skip
