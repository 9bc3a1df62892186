"""Validate checks that need one request at a time (shell): identity, chat, reasoning, tools."""

from __future__ import annotations

import json
from typing import Any

from servekit.client.http import CONNECT
from servekit.client.models import malformed_models, model_entries, model_len
from servekit.client.transport import CONNECT_HINT
from servekit.validate.context import ChatAnswer, Context, Outcome
from servekit.validate.judge import (
    REASONING_MARKERS,
    TOOL_MARKERS,
    garbage_reason,
    judge_tool_call,
    leaked_markers,
)
from servekit.validate.prompts import (
    CHAT_PROMPT,
    REASONING_PROMPT,
    TOOL_PROMPT,
    TOOL_RESULT,
    WEATHER_TOOL,
    thinking_off,
)

DEFAULT_THINKING = {"thinking_mode": "enabled"}  # MiniMax-M3's chat-template switch


def failed(answer: ChatAnswer) -> Outcome | None:
    """A failed check for a request that failed, naming its class and message."""
    if answer.error_kind is None:
        return None
    return Outcome("fail", f"{answer.error_kind}: {answer.error}")


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def thinking_on(ctx: Context) -> dict[str, Any]:
    """The chat-template arguments that turn thinking on."""
    return dict(ctx.spec.thinking_kwargs or DEFAULT_THINKING)


async def check_health(ctx: Context) -> Outcome:
    """GET /health answers 200."""
    reply = await ctx.get("/health")
    if reply.status == 200:
        return Outcome("pass", f"200 in {reply.elapsed_s * 1000:.0f} ms")
    if reply.error_kind == CONNECT:
        return Outcome("fail", f"/health: {reply.error}; {CONNECT_HINT}")
    return Outcome(
        "fail", f"/health: {reply.error_kind or reply.status}: {reply.error or ''}".strip()
    )


async def check_models(ctx: Context) -> Outcome:
    """/v1/models lists the served name; /version is recorded."""
    reply = await ctx.get("/v1/models")
    if reply.error_kind is not None:
        return Outcome("fail", f"/v1/models: {reply.error_kind}: {reply.error}")
    entries = model_entries(reply.doc)
    if not entries:
        return Outcome("fail", "/v1/models lists no model")
    if problem := malformed_models(entries):
        return Outcome("fail", f"malformed /v1/models reply: {problem}")
    names = [str(d["id"]) for d in entries]
    wanted = ctx.spec.model or names[0]
    if wanted not in names:
        return Outcome(
            "fail", f"/v1/models lists {names}, not {wanted!r}: check --served-model-name"
        )
    entry = entries[names.index(wanted)]
    ctx.model = wanted
    ctx.max_model_len = model_len(entry)
    version = await ctx.get("/version", timeout_s=5.0)
    server_version = version.doc.get("version") if isinstance(version.doc, dict) else None
    return Outcome(
        "pass",
        f"serves {wanted!r}, max_model_len {ctx.max_model_len}, "
        f"version {server_version or 'unknown'}",
        {"model": wanted, "max_model_len": ctx.max_model_len, "server_version": server_version},
    )


async def learn_model(ctx: Context) -> None:
    """Learn the served name and max_model_len quietly (the `models` check reports them)."""
    reply = await ctx.get("/v1/models")
    entries = [d for d in model_entries(reply.doc) if isinstance(d["id"], str)]
    names: list[str] = [d["id"] for d in entries]
    if not names:
        ctx.model = ctx.spec.model or ""
        return
    ctx.model = ctx.spec.model if ctx.spec.model in names else names[0]
    ctx.max_model_len = model_len(entries[names.index(ctx.model)])


async def check_max_model_len(ctx: Context) -> Outcome:
    """max_model_len equals the profile's."""
    expected = ctx.spec.expected_max_model_len
    if expected is None:
        return Outcome("skip", "no profile to compare with (--profile)")
    if ctx.max_model_len == expected:
        return Outcome("pass", f"{expected} as the profile says")
    return Outcome(
        "fail", f"the server has max_model_len {ctx.max_model_len}, the profile {expected}"
    )


def _content_problems(answer: ChatAnswer, what: str) -> list[str]:
    problems = []
    if leaks := leaked_markers(answer.content, REASONING_MARKERS + TOOL_MARKERS):
        problems.append(
            f"{what} content leaks {', '.join(leaks)}: check --reasoning-parser/--tool-call-parser"
        )
    return problems


async def check_chat(ctx: Context) -> Outcome:
    """A non-streaming answer with consistent usage; the streamed one matches it."""
    body = ctx.body(_user(CHAT_PROMPT), chat_template_kwargs=thinking_off(thinking_on(ctx)))
    plain = await ctx.chat(body)
    if bad := failed(plain):
        return bad
    problems = _content_problems(plain, "the")
    if reason := garbage_reason(plain.content):
        problems.append(f"the answer is garbage: {reason}")
    p, c = plain.prompt_tokens, plain.completion_tokens
    if not isinstance(p, int) or not isinstance(c, int) or p <= 0 or c <= 0:
        problems.append(f"usage missing or empty (prompt_tokens={p}, completion_tokens={c})")
    elif c > ctx.spec.max_tokens:
        problems.append(f"completion_tokens {c} exceeds max_tokens {ctx.spec.max_tokens}")
    streamed = await ctx.chat_stream(body)
    if bad := failed(streamed):
        return Outcome("fail", f"streaming: {bad.detail}")
    if streamed.completion_tokens != c:
        problems.append(
            f"the stream's usage counts {streamed.completion_tokens} tokens, the plain answer {c}"
        )
    if problems:
        return Outcome("fail", "; ".join(problems))
    if streamed.content != plain.content:
        return Outcome(
            "warn", "streamed and plain greedy answers differ: the engine is not deterministic here"
        )
    return Outcome("pass", f"{c} tokens, streamed = plain: {plain.content[:60]!r}")


async def check_reasoning(ctx: Context) -> Outcome:
    """Thinking on: reasoning and an answer, apart; thinking off: no reasoning."""
    on = ctx.body(_user(REASONING_PROMPT), chat_template_kwargs=thinking_on(ctx),
                  max_tokens=ctx.spec.reasoning_max_tokens)  # fmt: skip
    plain = await ctx.chat(on)
    if bad := failed(plain):
        return bad
    problems = _content_problems(plain, "thinking-on")
    if not plain.reasoning:
        kwargs = on["chat_template_kwargs"]
        if not ctx.spec.thinking_expected and not problems:
            return Outcome("warn", f"no reasoning with chat_template_kwargs {kwargs}: if the "
                           "model thinks, start the server with --reasoning-parser")  # fmt: skip
        problems.append(f"no reasoning returned with chat_template_kwargs {kwargs}: "
                        "check --reasoning-parser")  # fmt: skip
    if not plain.content.strip():
        problems.append(
            f"no answer after the reasoning within {ctx.spec.reasoning_max_tokens} tokens"
        )
    streamed = await ctx.chat_stream(on)
    if bad := failed(streamed):
        return Outcome("fail", f"streaming: {bad.detail}")
    problems += _content_problems(streamed, "streamed thinking-on")
    if bool(streamed.reasoning) != bool(plain.reasoning):
        problems.append("streamed and plain answers disagree on whether there is reasoning")
    off = ctx.body(_user(REASONING_PROMPT), chat_template_kwargs=thinking_off(thinking_on(ctx)),
                   max_tokens=ctx.spec.reasoning_max_tokens)  # fmt: skip
    quiet = await ctx.chat(off)
    if bad := failed(quiet):
        return Outcome("fail", f"thinking off: {bad.detail}")
    problems += _content_problems(quiet, "thinking-off")
    if quiet.reasoning:
        problems.append(f"reasoning returned with thinking off ({off['chat_template_kwargs']})")
    if not quiet.content.strip():
        problems.append("no answer with thinking off")
    if problems:
        return Outcome("fail", "; ".join(problems))
    note = (
        " (older field reasoning_content)" if plain.reasoning_field == "reasoning_content" else ""
    )
    agree = streamed.reasoning == plain.reasoning and streamed.content == plain.content
    return Outcome(
        "pass" if agree else "warn",
        f"{len(plain.reasoning)} chars of reasoning{note}, then {plain.content[:40]!r}; "
        "thinking off: answer only" + ("" if agree else "; streamed and plain greedy texts differ"),
    )


def _judge_calls(answer: ChatAnswer, what: str) -> list[str]:
    if not answer.tool_calls:
        return [f"{what}: no tool_calls (content {answer.content[:60]!r}): check "
                "--enable-auto-tool-choice and --tool-call-parser"]  # fmt: skip
    problems = []
    for name, arguments, _ in answer.tool_calls:
        verdict = judge_tool_call(name, arguments, [WEATHER_TOOL])
        if not verdict.ok:
            problems.append(f"{what}: {verdict.detail}")
    if answer.finish_reason != "tool_calls":
        problems.append(f"{what}: finish_reason is {answer.finish_reason!r}, not 'tool_calls'")
    if leaks := leaked_markers(answer.content, TOOL_MARKERS + REASONING_MARKERS):
        problems.append(f"{what}: content leaks {', '.join(leaks)}: check --tool-call-parser")
    return problems


def _normal(calls: list[tuple[str, str, str | None]]) -> list[tuple[str, Any]]:
    out = []
    for name, arguments, _ in calls:
        try:
            out.append((name, json.loads(arguments or "{}")))
        except (ValueError, RecursionError):  # not JSON, a 5000-digit number, too deep
            out.append((name, arguments))
    return out


async def check_tools(ctx: Context) -> Outcome:
    """Automatic tool choice returns a valid call, streamed deltas reassemble to it, and the
    tool's result gets an answer."""
    kwargs = thinking_off(thinking_on(ctx))
    limit = ctx.spec.reasoning_max_tokens
    body = ctx.body(_user(TOOL_PROMPT), tools=[WEATHER_TOOL], tool_choice="auto",
                    chat_template_kwargs=kwargs, max_tokens=limit)  # fmt: skip
    plain = await ctx.chat(body)
    if bad := failed(plain):
        return bad
    problems = _judge_calls(plain, "plain")
    streamed = await ctx.chat_stream(body)
    if bad := failed(streamed):
        return Outcome("fail", f"streaming: {bad.detail}")
    problems += _judge_calls(streamed, "streamed")
    if not problems and _normal(streamed.tool_calls) != _normal(plain.tool_calls):
        problems.append(
            f"streamed calls {_normal(streamed.tool_calls)} differ from plain "
            f"{_normal(plain.tool_calls)}"
        )
    if problems:
        return Outcome("fail", "; ".join(problems))
    name, arguments, call_id = plain.tool_calls[0]
    call_id = call_id or "call_0"
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    follow = ctx.body(
        [*_user(TOOL_PROMPT),
         {"role": "assistant", "content": "", "tool_calls": [call]},
         {"role": "tool", "tool_call_id": call_id, "content": TOOL_RESULT}],
        tools=[WEATHER_TOOL], chat_template_kwargs=kwargs, max_tokens=limit,
    )  # fmt: skip
    answer = await ctx.chat(follow)
    if bad := failed(answer):
        return Outcome("fail", f"after the tool result: {bad.detail}")
    if not answer.content.strip() or (reason := garbage_reason(answer.content)):
        why = "no answer" if not answer.content.strip() else reason
        return Outcome("fail", f"after the tool result: {why}")
    if leaks := leaked_markers(answer.content, TOOL_MARKERS + REASONING_MARKERS):
        return Outcome("fail", f"after the tool result the content leaks {', '.join(leaks)}")
    return Outcome("pass", f"{name}({arguments}) plain = streamed; then {answer.content[:40]!r}")
