"""Interpret an OpenAI-compatible completion stream (core): SSE events in, one result out.

Chat and completions chunks are read leniently: `delta.reasoning` (or the older
`delta.reasoning_content`), `delta.content`, `delta.tool_calls` (reassembled by `index`),
completions' `text`, a choice's `token_ids` (vLLM with `return_token_ids`),
`finish_reason`, and `usage` (per chunk with vLLM's `continuous_usage_stats`, or once at
the end) with `prompt_tokens_details.cached_tokens` (vLLM with
`--enable-prompt-tokens-details`).

**A chunk is a token delivery when the server says so, whatever its text.** A token that
decodes to nothing (a special token, the first bytes of a multi-byte character, text a
parser holds back) still arrives as a chunk, with empty text; it is counted and timed like
any other. Tokens per chunk come, in order of trust, from the chunk's `token_ids`, from
per-chunk usage (the increase over the previous chunk), or from the final usage count
spread over the chunks that may carry tokens (every choice chunk except the chat role
chunk and a chunk that carries nothing but a finish reason); with no usage at all, one
token per such chunk. `StreamResult.token_source` says which. A stream is `empty_output`
only when the server counted no token and nothing was delivered.

Nothing here raises on a bad stream: every problem is classified into `error_kind`. Counts
are checked, not taken at face value: a count that is not a non-negative integer (a
boolean, a float, -8), a completion count that falls from chunk to chunk, exceeds the
request's `max_tokens` or is below the number of chunks that carried text, token ids that
add up to another count than the final usage, and a cached count above the prompt count,
are `invalid_usage`; data after `[DONE]` is a `malformed_chunk`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from operator import sub
from typing import Any

import orjson

# Failure classes shared with the HTTP layer.
MALFORMED_CHUNK = "malformed_chunk"
STREAM_CUT = "stream_cut"
EMPTY_OUTPUT = "empty_output"
INVALID_USAGE = "invalid_usage"
MAX_USAGE_TOKENS = 2**31
"""The largest token count believed without a `max_tokens` to check it against."""

# Where a stream's tokens per chunk came from (`StreamResult.token_source`), the most
# trusted first (`records.TOKEN_SOURCES`; "engine" is the offline simulator's).
TOKEN_IDS = "token_ids"  # noqa: S105 - a count's source, not a secret
CHUNK_USAGE = "chunk_usage"
FINAL_USAGE = "final_usage"
ONE_PER_CHUNK = "one_per_chunk"

# What one choice chunk carried (the last column of `StreamReader._rows`).
_EMPTY = 0  # no text: a token that decoded to nothing, or token ids alone
_REASONING = 1  # reasoning text only
_ANSWER = 2  # content or a tool-call delta
_BARE = 3  # the chat role chunk, or a finish reason alone: tokens only if counts say so
_NONE = -1  # no token_ids / no usage on the chunk


@dataclass(slots=True)
class ToolCall:
    """One tool call reassembled from its deltas."""

    index: int
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class StreamResult:
    """What a stream delivered, with arrival times in integer nanoseconds.

    `chunk_ns` and `chunk_tokens` pair up: one entry per chunk that delivered at least one
    token (text or not). `text_chunks` counts the chunks that carried reasoning or content
    text, a separate fact from the token counts.
    """

    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    text_chunks: int = 0
    token_source: str | None = None
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

    __slots__ = ("_count_ns", "_limit", "_rows", "result")

    def __init__(self, *, max_tokens: int | None = None) -> None:
        self.result = StreamResult()
        self._limit = MAX_USAGE_TOKENS if max_tokens is None else max_tokens
        # One row per choice chunk, in arrival order: arrival, token_ids length, cumulative
        # usage completion count (both _NONE when the chunk had none), what it held.
        self._rows: list[tuple[int, int, int, int]] = []
        self._count_ns = 0  # when the completion count last grew (a usage-only chunk too)

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
        if type(chunk) is not dict:
            self._fail(MALFORMED_CHUNK, "chunk is not a JSON object")
            return
        choices = chunk.get("choices")
        if not choices and "error" in chunk:
            err = chunk["error"]
            message = err.get("message") if isinstance(err, dict) else str(err)
            self._fail("server_error", str(message)[:500])
            return
        usage_tokens = _NONE
        usage = chunk.get("usage")
        if usage and type(usage) is dict:
            # the common case inline (type() is int: a bool is no count); _count explains
            prompt = usage.get("prompt_tokens")
            if type(prompt) is not int or not 0 <= prompt <= MAX_USAGE_TOKENS:
                prompt = self._count(usage, "prompt_tokens", MAX_USAGE_TOKENS)
            if prompt is not None:
                r.prompt_tokens = prompt
            details = usage.get("prompt_tokens_details")
            if details is not None:
                self._cached(details)
            limit = self._limit
            completion = usage.get("completion_tokens")
            if type(completion) is not int or not 0 <= completion <= limit:
                completion = self._count(usage, "completion_tokens", limit)
            if completion is not None:
                before = r.completion_tokens
                if before is not None and completion < before:
                    self._fail(INVALID_USAGE, f"usage completion_tokens fell from {before} "
                               f"to {completion}")  # fmt: skip
                elif before is None or completion > before:
                    self._count_ns = arrival_ns
                usage_tokens = r.completion_tokens = completion
        if not choices or type(choices) is not list:
            return
        choice = choices[0]
        if type(choice) is not dict:
            self._fail(MALFORMED_CHUNK, "choice is not an object")
            return
        finish = choice.get("finish_reason")
        if finish:
            r.finish_reason = str(finish)
        ids = choice.get("token_ids")
        if ids is None:
            ids_count = _NONE
        elif type(ids) is list:
            ids_count = len(ids)
        else:
            self._fail(MALFORMED_CHUNK, "token_ids is not a list")
            ids_count = _NONE
        delta = choice.get("delta")
        if type(delta) is dict:
            content = delta.get("content")
            if type(content) is str and content and len(delta) == 1:  # an answer token
                r.content.append(content)
                r.text_chunks += 1
                if r.first_answer_ns is None:
                    r.first_answer_ns = arrival_ns
                kind = _ANSWER
            else:
                kind = self._delta(delta, arrival_ns)
                if kind == _EMPTY and "role" in delta and ids_count == _NONE:
                    kind = _BARE  # the chat stream's first chunk names the role, no token
        else:
            text = choice.get("text")  # /v1/completions
            if type(text) is str and text:
                r.content.append(text)
                r.text_chunks += 1
                if r.first_answer_ns is None:
                    r.first_answer_ns = arrival_ns
                kind = _ANSWER
            elif type(text) is str or ids_count != _NONE:
                kind = _EMPTY
            else:
                kind = _BARE
        if kind == _EMPTY and finish and ids_count == _NONE:
            kind = _BARE  # a finish reason with empty text: no token unless counts say so
        self._rows.append((arrival_ns, ids_count, usage_tokens, kind))

    def _delta(self, delta: dict[str, Any], arrival_ns: int) -> int:
        """Keep a chat delta's text and tool calls; what the chunk held (`_EMPTY`...)."""
        r = self.result
        kind = _BARE
        text = False
        content = delta.get("content")
        if type(content) is str:
            kind = _EMPTY
            if content:
                r.content.append(content)
                kind, text = _ANSWER, True
        reasoning = delta.get("reasoning")
        if not reasoning:
            reasoning = delta.get("reasoning_content") or reasoning
        if type(reasoning) is str:
            if reasoning:
                r.reasoning.append(reasoning)
                text = True
                if kind != _ANSWER:
                    kind = _REASONING
            elif kind == _BARE:
                kind = _EMPTY
        calls = delta.get("tool_calls")
        if calls and self._tool_deltas(calls):
            kind = _ANSWER
        elif kind == _BARE and not delta:
            kind = _EMPTY  # `delta: {}`: a token a parser held back (vLLM with token ids)
        if text:
            r.text_chunks += 1
        if kind == _ANSWER and r.first_answer_ns is None:
            r.first_answer_ns = arrival_ns
        return kind

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
        """Close the stream: classify cuts and empty output, and count tokens per chunk.

        Token ids on any chunk: each chunk carries as many tokens as its ids (a chunk
        without them none), and they must add up to the final usage. Else per-chunk usage,
        when it arrives on more than one chunk (vLLM's `continuous_usage_stats`): each
        chunk carries the increase, and a final count beyond the last chunk goes to the
        last delivery. Else the final count is spread over the chunks that may carry
        tokens (the remainder to the last ones); without a count, one token each. A count
        with no chunk to carry it arrives with the chunk that reported it.
        """
        r = self.result
        if cut or not r.done:
            self._fail(STREAM_CUT, "the stream ended before [DONE]")
        if r.completion_tokens is not None and r.completion_tokens < r.text_chunks:
            self._fail(INVALID_USAGE, f"usage counts {r.completion_tokens} completion tokens "
                       f"but {r.text_chunks} chunks carried text")  # fmt: skip
        # Columns of the rows; the work below is C-level list operations, no Python loop
        # per chunk in the common shapes (this runs once for every stream).
        columns = [list(column) for column in zip(*self._rows, strict=True)]
        ns, ids, usage, kinds = columns or [[], [], [], []]
        counts, source = _counts(ids, usage, kinds, r.completion_tokens)
        if source == TOKEN_IDS and r.completion_tokens not in (None, sum(counts)):
            self._fail(INVALID_USAGE, f"the chunks' token_ids hold {sum(counts)} tokens but "
                       f"usage counts {r.completion_tokens}")  # fmt: skip
        if r.error_kind == INVALID_USAGE:  # not believed: one token per chunk instead
            r.cached_tokens = r.completion_tokens = None
            counts, source = _spread(kinds, None), ONE_PER_CHUNK
        r.token_source = source
        if 0 in counts:  # keep the chunks that delivered a token
            ns = list(compress(ns, counts))
            kinds = list(compress(kinds, counts))
            counts = list(filter(None, counts))
        r.chunk_ns, r.chunk_tokens = ns, counts
        total, counted = r.completion_tokens, sum(counts)
        if total is not None and total > counted:
            if counts:
                counts[-1] += total - counted
            else:  # the server counted tokens no chunk showed: they arrived with the count
                ns.append(self._count_ns)
                counts.append(total)
                kinds.append(_EMPTY)
        if ns:
            r.first_token_ns = ns[0]
        elif r.error_kind is None:
            self._fail(EMPTY_OUTPUT, "the stream carried no generated token")
        r.reasoning_tokens = _reasoning_tokens(kinds, counts) if r.reasoning else 0
        return r


def _counts(
    ids: list[int], usage: list[int], kinds: list[int], total: int | None
) -> tuple[list[int], str]:
    """Tokens per choice chunk (0: it delivered none) and where they came from."""
    if ids.count(_NONE) < len(ids):
        return (ids if min(ids) >= 0 else [max(n, 0) for n in ids]), TOKEN_IDS
    seen = len(usage) - usage.count(_NONE)
    if seen >= 2 or (len(usage) == 1 and seen):
        if _NONE not in usage:  # vLLM's continuous usage: a count on every chunk
            steps = list(map(sub, usage, [0, *usage[:-1]]))
            if min(steps) >= 0:
                return steps, CHUNK_USAGE
        counted = 0
        counts = []
        for used in usage:
            step = used - counted if used > counted else 0
            counted += step
            counts.append(step)
        return counts, CHUNK_USAGE
    return _spread(kinds, total), ONE_PER_CHUNK if total is None else FINAL_USAGE


def _spread(kinds: list[int], total: int | None) -> list[int]:
    """`total` tokens over the chunks that may carry them (all but `_BARE` ones), one each
    when `total` is None; past the count, the last empty-text chunks get none."""
    able = [i for i, kind in enumerate(kinds) if kind != _BARE]
    if total is None:
        total = len(able)
    elif total < len(able):  # keep the text chunks (total >= them, checked before)
        texts = [i for i in able if kinds[i] != _EMPTY]
        empties = [i for i in able if kinds[i] == _EMPTY][: max(total - len(texts), 0)]
        able = sorted(texts + empties)
    counts = [0] * len(kinds)
    if able:
        base, extra = divmod(total, len(able))
        first_extra = len(able) - extra
        for position, index in enumerate(able):
            counts[index] = base + (1 if position >= first_extra else 0)
    return counts


def _reasoning_tokens(kinds: list[int], tokens: list[int]) -> int:
    """Tokens of the deliveries that were reasoning. A delivery without text belongs to
    the text that follows it (a split character completes in the next chunk); those after
    the last text belong to it."""
    total = trailing = 0
    last_text = following = _NONE
    for kind, count in zip(reversed(kinds), reversed(tokens), strict=True):
        if kind in (_REASONING, _ANSWER):
            if last_text == _NONE:
                last_text = kind
            following = kind
            if kind == _REASONING:
                total += count
        elif following == _NONE:
            trailing += count
        elif following == _REASONING:
            total += count
    return total + (trailing if last_text == _REASONING else 0)
