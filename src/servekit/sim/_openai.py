"""OpenAI/vLLM wire format of the live simulator (core): request models and response bodies.

Requests are validated with pydantic at the edge. Unknown request fields are ignored, as
vLLM does, because clients send OpenAI options the simulator has no use for (top_p,
presence_penalty, logprobs, ...). Responses are plain dicts shaped like vLLM's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from servekit.sim.chat import Message, ToolSpec
from servekit.sim.textgen import Segment


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ContentPart(_Lenient):
    """One part of a multi-part message content."""

    type: str
    text: str | None = None


class ChatMessageIn(_Lenient):
    """A chat message as the client sends it."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[dict[str, JsonValue]] | None = None
    tool_call_id: str | None = None

    def to_message(self) -> Message:
        """The message as the prompt renders it."""
        if isinstance(self.content, list):
            text = "".join(
                p.text or "" if p.type == "text" else f"<{p.type}>" for p in self.content
            )
        else:
            text = self.content or ""
        calls = json.dumps(self.tool_calls, sort_keys=True) if self.tool_calls else ""
        return Message(self.role, text, calls)


class FunctionIn(_Lenient):
    """A function definition offered as a tool."""

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=dict)


class ToolIn(_Lenient):
    """A tool offered to the model."""

    type: Literal["function"] = "function"
    function: FunctionIn

    def to_spec(self) -> ToolSpec:
        """The tool as the answer planner sees it."""
        f = self.function
        return ToolSpec(f.name, f.parameters, f.description)


class NamedFunction(_Lenient):
    """The function a named tool_choice forces."""

    name: str


class NamedToolChoice(_Lenient):
    """`tool_choice: {"type": "function", "function": {"name": ...}}`."""

    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Lenient):
    """`stream_options`, with vLLM's defaults (include_usage true once the object is sent)."""

    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


def usage_flags(options: StreamOptions | None) -> tuple[bool, bool]:
    """(final usage chunk, usage on every chunk) for a stream, by vLLM's rule.

    No `stream_options` means no usage at all; per-chunk usage needs both flags.
    """
    if options is None:
        return False, False
    include = bool(options.include_usage)
    return include, include and bool(options.continuous_usage_stats)


# Fields where JSON null means "the default", as vLLM's optional fields do.
_NULL_MEANS_DEFAULT = frozenset(
    {"temperature", "n", "stream", "ignore_eos", "min_tokens", "return_token_ids"}
)


class _Sampling(_Lenient):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False
    temperature: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    return_token_ids: bool = False  # vLLM's: chunks carry their tokens' ids

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: object) -> object:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None or k not in _NULL_MEANS_DEFAULT}
        return data

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError(f"the simulator answers with one choice; n must be 1, not {value}")
        return value


class ChatRequest(_Sampling):
    """A `POST /v1/chat/completions` body."""

    messages: list[ChatMessageIn] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[ToolIn] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    chat_template_kwargs: dict[str, JsonValue] | None = None

    @field_validator("tool_choice")
    @classmethod
    def _needs_tools(
        cls, value: str | NamedToolChoice | None, info: ValidationInfo
    ) -> str | NamedToolChoice | None:
        if value not in (None, "none") and info.data.get("tools") is None:
            raise ValueError("When using `tool_choice`, `tools` must be set.")
        return value

    @property
    def output_limit(self) -> int | None:
        """max_tokens, or the newer max_completion_tokens."""
        return self.max_tokens if self.max_tokens is not None else self.max_completion_tokens

    @property
    def tool_choice_name(self) -> str | None:
        """tool_choice as one string: none/auto/required or the forced function's name."""
        if isinstance(self.tool_choice, NamedToolChoice):
            return self.tool_choice.function.name
        return self.tool_choice


class CompletionRequest(_Sampling):
    """A `POST /v1/completions` body (one prompt: text, or token ids)."""

    prompt: str | list[int] | list[str]
    max_tokens: int | None = Field(default=16, ge=1)  # vLLM's default for completions

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[int] | list[str]) -> str | list[int] | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("the prompt is empty")
        if isinstance(value, list) and isinstance(value[0], str) and len(value) > 1:
            raise ValueError("the simulator serves one prompt per request; send them one by one")
        return value


class TokenizeRequest(_Lenient):
    """A `POST /tokenize` body: a prompt or chat messages."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessageIn] | None = None
    tools: list[ToolIn] | None = None


class DetokenizeRequest(_Lenient):
    """A `POST /detokenize` body."""

    model: str | None = None
    tokens: list[int]


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming each invalid field (at most three) and what is wrong with it."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error["loc"]) or "body"
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def error_body(
    message: str, *, kind: str = "BadRequestError", code: int = 400, param: str | None = None
) -> dict[str, JsonValue]:
    """vLLM's (and OpenAI's) error response body: `{"error": {message, type, param, code}}`."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def context_length_message(max_model_len: int, prompt_tokens: int, max_tokens: int | None) -> str:
    """vLLM's message for a request that does not fit in the context."""
    if max_tokens is None:
        return (
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the input "
            "messages."
        )
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, you requested "
        f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in "
        "the completion). Please reduce the length of the messages or completion."
    )


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    prompt_details: dict[str, JsonValue] | None = None,
) -> dict[str, JsonValue]:
    """A usage object; `prompt_details` becomes its `prompt_tokens_details`."""
    doc: dict[str, JsonValue] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if prompt_details is not None:
        doc["prompt_tokens_details"] = prompt_details
    return doc


def prompt_tokens_details(cached: int, created: int, *, chat: bool) -> dict[str, JsonValue]:
    """`usage.prompt_tokens_details` as vLLM 0.32 writes it with
    --enable-prompt-tokens-details: the prompt tokens its prefix cache served, and for chat
    also the prompt tokens it wrote to the cache (and no multimodal tokens)."""
    if not chat:
        return {"cached_tokens": cached}
    return {"cached_tokens": cached, "created_cache_tokens": created, "multimodal_tokens": None}


def chat_delta(
    segments: Sequence[Segment], *, call_id: str, tool_name: str | None
) -> dict[str, JsonValue]:
    """The `delta` of the chat chunk of one engine step (reasoning, content and tool call)."""
    delta: dict[str, JsonValue] = {}
    for segment in segments:
        if segment.kind != "tool":
            delta[segment.kind] = segment.text
            continue
        function: dict[str, JsonValue] = {"arguments": segment.text}
        call: dict[str, JsonValue] = {"index": 0, "function": function}
        if segment.first:
            call = {"index": 0, "id": call_id, "type": "function", "function": function}
            function["name"] = tool_name
        delta["tool_calls"] = [call]
    return delta


def chat_chunk(
    rid: str,
    created: int,
    model: str,
    delta: dict[str, JsonValue] | None,
    *,
    finish_reason: str | None = None,
    usage_doc: dict[str, JsonValue] | None = None,
    token_ids: list[JsonValue] | None = None,
) -> dict[str, JsonValue]:
    """A `chat.completion.chunk`; delta None makes the usage-only chunk (empty choices);
    `token_ids` go on its choice (vLLM's `return_token_ids`)."""
    choice: dict[str, JsonValue] = {
        "index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason
    }  # fmt: skip
    if token_ids is not None:
        choice["token_ids"] = token_ids
    chunk: dict[str, JsonValue] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [] if delta is None else [choice],
    }
    if usage_doc is not None:
        chunk["usage"] = usage_doc
    return chunk


def completion_chunk(
    rid: str,
    created: int,
    model: str,
    text: str | None,
    *,
    finish_reason: str | None = None,
    usage_doc: dict[str, JsonValue] | None = None,
    token_ids: list[JsonValue] | None = None,
    prompt_token_ids: list[JsonValue] | None = None,
) -> dict[str, JsonValue]:
    """A streamed `text_completion`; text None makes the usage-only chunk (empty choices);
    `token_ids` and (on the first chunk) `prompt_token_ids` go on its choice, as vLLM's
    `return_token_ids` puts them."""
    choice: dict[str, JsonValue] = {
        "index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason
    }  # fmt: skip
    if prompt_token_ids is not None:
        choice["prompt_token_ids"] = prompt_token_ids
    if token_ids is not None:
        choice["token_ids"] = token_ids
    chunk: dict[str, JsonValue] = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [] if text is None else [choice],
    }
    if usage_doc is not None:
        chunk["usage"] = usage_doc
    return chunk


def chat_completion(
    rid: str,
    created: int,
    model: str,
    texts: dict[str, str],
    *,
    tool_name: str | None,
    call_id: str,
    finish_reason: str,
    usage_doc: dict[str, JsonValue],
) -> dict[str, JsonValue]:
    """A non-streamed `chat.completion` from the answer's text per kind."""
    calls: list[JsonValue] = []
    if tool_name is not None:
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": tool_name, "arguments": texts.get("tool", "")},
            }
        )
    message: dict[str, JsonValue] = {
        "role": "assistant",
        "content": texts.get("content") if tool_name is None else None,
        "reasoning": texts.get("reasoning"),
        "tool_calls": calls,
    }
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage_doc,
    }


def text_completion(
    rid: str, created: int, model: str, text: str, *, finish_reason: str, usage_doc: JsonValue
) -> dict[str, JsonValue]:
    """A non-streamed `text_completion`."""
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        "usage": usage_doc,
    }


def sse(document: JsonValue) -> bytes:
    """One server-sent event carrying a JSON document."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"
