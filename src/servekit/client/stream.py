"""Interpret an OpenAI-compatible completion stream (core): SSE events in, one result out.

Chat and completions chunks are read leniently: `delta.reasoning` (or the older
`delta.reasoning_content`), `delta.content`, `delta.tool_calls` (reassembled by `index`),
completions' `text`, `finish_reason`, and `usage` (per chunk with vLLM's
`continuous_usage_stats`, or once at the end) with `prompt_tokens_details.cached_tokens`
(vLLM with `--enable-prompt-tokens-details`). Nothing here raises on a bad stream: every
problem is classified into `error_kind`. Usage is checked, not taken at face value: a count
that is not a non-negative integer (a boolean, a float, -8), a completion count that falls
from chunk to chunk, exceeds the request's `max_tokens` or is below the number of chunks
that carried text, and a cached count above the prompt count, are `invalid_usage`; data
after `[DONE]` is a `malformed_chunk`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

# Failure classes shared with the HTTP layer.
MALFORMED_CHUNK = "malformed_chunk"
STREAM_CUT = "stream_cut"
EMPTY_OUTPUT = "empty_output"
INVALID_USAGE = "invalid_usage"
MAX_USAGE_TOKENS = 2**31
"""The largest token count believed without a `max_tokens` to check it against."""


@dataclass(slots=True)
class ToolCall:
    """One tool call reassembled from its deltas."""

    index: int
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class StreamResult:
    """What a stream delivered, with arrival times in integer nanoseconds."""

    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    first_token_ns: int | None = None
    first_answer_ns: int | None = None
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    tool_calls: dict[int, ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage prompt_tokens_details.cached_tokens
    reasoning_tokens: int = 0
    done: bool = False
    error_kind: str | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        """The answer's content."""
        return "".join(self.content)

    @property
    def reasoning_text(self) -> str:
        """The reasoning text."""
        return "".join(self.reasoning)


class StreamReader:
    """Feed each SSE event's data with its arrival time; call `finish()` at end of stream."""

    def __init__(self, *, max_tokens: int | None = None) -> None:
        self.result = StreamResult()
        self._completion_limit = MAX_USAGE_TOKENS if max_tokens is None else max_tokens
        self._usage: list[int | None] = []  # cumulative completion tokens seen on each chunk
        self._reasoning_chunks: list[int] = []  # indexes of chunks that were reasoning only
        self._text_chunks = 0  # chunks with content or reasoning (a tool-call parser may
        # send a chunk of held-back arguments without a new token: those are not counted)

    def feed(self, data: str, arrival_ns: int) -> None:
        """Consume one event's data (`[DONE]` or a JSON chunk); never raises."""
        if self.result.done:  # a repeated [DONE] is harmless; data after it is not
            if data.strip() != "[DONE]":
                self._fail(MALFORMED_CHUNK, "an event after [DONE]")
            return
        try:
            chunk: Any = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            if data.strip() == "[DONE]":
                self.result.done = True
            else:
                self._fail(MALFORMED_CHUNK, f"chunk is not JSON ({exc.msg} at {exc.pos})")
            return
        try:
            self._chunk(chunk, arrival_ns)
        except (ValueError, TypeError, RecursionError, AttributeError) as exc:
            # e.g. fields of the wrong type deep inside a chunk
            self._fail(MALFORMED_CHUNK, f"chunk is malformed ({type(exc).__name__})")

    def _chunk(self, chunk: Any, arrival_ns: int) -> None:
        # Runs for every chunk of every stream: plain lookups, the common shape first.
        r = self.result
        if not isinstance(chunk, dict):
            self._fail(MALFORMED_CHUNK, "chunk is not a JSON object")
            return
        choices = chunk.get("choices")
        if not choices and "error" in chunk:
            err = chunk["error"]
            message = err.get("message") if isinstance(err, dict) else str(err)
            self._fail("server_error", str(message)[:500])
            return
        usage_tokens = None
        usage = chunk.get("usage")
        if usage and isinstance(usage, dict):
            # the common case inline (type() is int: a bool is no count); _count explains
            prompt = usage.get("prompt_tokens")
            if type(prompt) is not int or not 0 <= prompt <= MAX_USAGE_TOKENS:
                prompt = self._count(usage, "prompt_tokens", MAX_USAGE_TOKENS)
            if prompt is not None:
                r.prompt_tokens = prompt
            details = usage.get("prompt_tokens_details")
            if details is not None:
                self._cached(details)
            limit = self._completion_limit
            completion = usage.get("completion_tokens")
            if type(completion) is not int or not 0 <= completion <= limit:
                completion = self._count(usage, "completion_tokens", limit)
            if completion is not None:
                if r.completion_tokens is not None and completion < r.completion_tokens:
                    self._fail(INVALID_USAGE, f"usage completion_tokens fell from "
                               f"{r.completion_tokens} to {completion}")  # fmt: skip
                usage_tokens = r.completion_tokens = completion
        if not choices or not isinstance(choices, list):
            return
        reasoning, content, tools = self._deltas(choices[0])
        if reasoning or content or tools:
            if r.first_token_ns is None:
                r.first_token_ns = arrival_ns
            if (content or tools) and r.first_answer_ns is None:
                r.first_answer_ns = arrival_ns
            if reasoning and not (content or tools):
                self._reasoning_chunks.append(len(r.chunk_ns))
            if reasoning or content:
                self._text_chunks += 1
            r.chunk_ns.append(arrival_ns)
            self._usage.append(usage_tokens)

    def _cached(self, details: Any) -> None:
        """`prompt_tokens_details.cached_tokens`: a count no larger than the prompt."""
        r = self.result
        if not isinstance(details, dict):
            self._fail(INVALID_USAGE, "usage prompt_tokens_details is not an object")
            return
        limit = MAX_USAGE_TOKENS if r.prompt_tokens is None else r.prompt_tokens
        cached = self._count(details, "cached_tokens", limit)
        if cached is not None:
            r.cached_tokens = cached

    def _count(self, usage: dict[str, Any], name: str, limit: int) -> int | None:
        """A usage count when it is a plausible one; else None, and the stream is invalid."""
        value = usage.get(name)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit:
            return value
        shown = repr(value)[:40]
        why = f"over the {limit} allowed" if isinstance(value, int) and value > limit else ""
        self._fail(INVALID_USAGE, f"usage {name} is {shown}" + (f", {why}" if why else
                   ": not a token count"))  # fmt: skip
        return None

    def _deltas(self, choice: Any) -> tuple[str, str, bool]:
        r = self.result
        if not isinstance(choice, dict):
            self._fail(MALFORMED_CHUNK, "choice is not an object")
            return "", "", False
        if choice.get("finish_reason"):
            r.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            text = choice.get("text")  # /v1/completions
            if isinstance(text, str) and text:
                r.content.append(text)
                return "", text, False
            return "", "", False
        content = delta.get("content")
        if content and isinstance(content, str):
            r.content.append(content)
        else:
            content = ""
        reasoning = delta.get("reasoning") or delta.get("reasoning_content")
        if reasoning and isinstance(reasoning, str):
            r.reasoning.append(reasoning)
        else:
            reasoning = ""
        calls = delta.get("tool_calls")
        return reasoning, content, bool(calls) and self._tool_deltas(calls)

    def _tool_deltas(self, calls: Any) -> bool:
        """Reassemble tool-call deltas by `index`; True when any was well formed."""
        if not isinstance(calls, list):
            self._fail(MALFORMED_CHUNK, "tool_calls is not a list")
            return False
        tools = False
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("index", 0), int):
                self._fail(MALFORMED_CHUNK, "tool call delta without an integer index")
                continue
            tools = True
            index = call.get("index", 0)
            acc = self.result.tool_calls.setdefault(index, ToolCall(index))
            if call.get("id"):
                acc.id = str(call["id"])
            function = call.get("function") or {}
            if isinstance(function, dict):
                acc.name += str(function.get("name") or "")
                acc.arguments += str(function.get("arguments") or "")
        return tools

    def _fail(self, kind: str, message: str) -> None:
        if self.result.error_kind is None:
            self.result.error_kind = kind
            self.result.error = message

    def finish(self, *, cut: bool = False) -> StreamResult:
        """Close the stream: classify cuts and empty output, and fill tokens per chunk.

        Per-chunk usage counts only when it arrives on more than one token-carrying chunk
        (vLLM's `continuous_usage_stats`): each chunk then carries the increase, and a final
        usage-only count beyond the last chunk goes to the last chunk. Otherwise the final
        completion count is spread over the chunks that carried tokens (the remainder to the
        last ones), as DESIGN.md section 5 says.
        """
        r = self.result
        if cut or not r.done:
            self._fail(STREAM_CUT, "the stream ended before [DONE]")
        if r.error_kind is None and not r.chunk_ns:
            self._fail(EMPTY_OUTPUT, "the stream carried no generated token")
        n = len(r.chunk_ns)
        if r.completion_tokens is not None and r.completion_tokens < self._text_chunks:
            self._fail(INVALID_USAGE, f"usage counts {r.completion_tokens} completion tokens "
                       f"but {self._text_chunks} chunks carried text")  # fmt: skip
        if r.error_kind == INVALID_USAGE:
            r.cached_tokens = None
            r.completion_tokens = None  # not believed: one token per chunk below
            self._usage = [None] * n
        if n:
            total = max(r.completion_tokens if r.completion_tokens is not None else n, 0)
            seen = [u for u in self._usage if u is not None]
            if len(seen) >= 2 or (n == 1 and seen):
                counted = 0
                r.chunk_tokens = []
                for usage in self._usage:
                    step = max((usage if usage is not None else counted) - counted, 0)
                    counted += step
                    r.chunk_tokens.append(step)
                r.chunk_tokens[-1] += max(total - counted, 0)
            else:
                base, extra = divmod(total, n)
                r.chunk_tokens = [base + (1 if i >= n - extra else 0) for i in range(n)]
        r.reasoning_tokens = sum(r.chunk_tokens[i] for i in self._reasoning_chunks)
        return r
