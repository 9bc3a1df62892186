"""Validate checks that load the server (shell): long context, the concurrency ladder and
speculative decoding."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

from servekit.bench.files import open_regular
from servekit.bench.scrape import scrape, server_block
from servekit.errors import ServekitError
from servekit.kb.known_issues import Behaviour, known_issues, match_log_lines
from servekit.validate.checks_basic import failed, thinking_on
from servekit.validate.context import ChatAnswer, Context, Outcome
from servekit.validate.judge import first_difference, garbage_reason
from servekit.validate.prompts import NEEDLE_QUESTION, ladder_prompt, thinking_off
from servekit.workload.synthetic import words

NEEDLE = "48213"
MAX_SIZING_STEPS = 12
LONG_CONTEXT_SHARE = 0.9
MAX_WORDS_PER_TOKEN = 4  # filler words are one token or more: never more words than this
MIN_SIZED_SHARE = 0.5  # a long-context prompt below half its target does not count
OVERFLOW_EXTRA_TOKENS = 256
_PLAIN_ERRORS = {
    "stream_cut": "stream reset mid-response",
    "connect": "connection refused",
    "timeout": "no answer in time",
    "server_error": "an error event in the stream",
    "malformed_chunk": "a malformed chunk",
    "empty_output": "an empty stream",
}


def _messages(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def _count(ctx: Context, text: str) -> int | None:
    """The prompt's tokens by /tokenize, or None; a quarter of the check's time at most, and
    once /tokenize has failed it is not asked again (a stalled one would eat every check)."""
    if not ctx.tokenize_ok:
        return None
    body = {"model": ctx.model, "messages": _messages(text)}
    count = await ctx.server.tokenize(body, timeout_s=ctx.spec.check_timeout_s / 4)
    ctx.tokenize_ok = count is not None
    return count


def _needle_prompt(n_words: int) -> str:
    rng = random.Random(n_words)  # noqa: S311 - reproducible filler text, not a secret
    half = max(n_words // 2, 1)
    return (f"{words(half, rng)} The secret code is {NEEDLE}. {words(half, rng)}\n\n"
            f"{NEEDLE_QUESTION}")  # fmt: skip


async def sized_needle_prompt(ctx: Context, target: int) -> tuple[str, int | None, float]:
    """A needle prompt of `target` tokens (as the chat template counts them), its counted
    length (None without /tokenize) and the words-per-token ratio found."""
    n_words = target
    ratio = 1.0
    counted = await _count(ctx, _needle_prompt(n_words))
    for _ in range(MAX_SIZING_STEPS):
        if counted is None or counted == target:
            break
        ratio = n_words / max(counted, 1)
        step = round(target * ratio) - n_words
        n_words += step if step else (1 if counted < target else -1)
        # A /tokenize whose counts do not follow the prompt must not grow it without bound.
        n_words = min(max(n_words, 1), target * MAX_WORDS_PER_TOKEN)
        counted = await _count(ctx, _needle_prompt(n_words))
    return _needle_prompt(n_words), counted, ratio


async def check_long_context(ctx: Context) -> Outcome:
    """A needle prompt at ~90% of max_model_len completes; its TTFT is recorded."""
    limit = ctx.max_model_len
    target = ctx.spec.long_context_tokens or (round(limit * LONG_CONTEXT_SHARE) if limit else None)
    if target is None:
        return Outcome("skip", "max_model_len unknown: pass --long-context-tokens N")
    prompt, counted, _ = await sized_needle_prompt(ctx, target)
    if counted is not None and counted < target * MIN_SIZED_SHARE:
        # Passing on a far shorter prompt would say nothing about long context.
        return Outcome("fail", f"could build only a {counted}-token prompt for {target} tokens "
                       "(/tokenize counts do not grow with the prompt)")  # fmt: skip
    body = ctx.body(_messages(prompt), max_tokens=16,
                    chat_template_kwargs=thinking_off(thinking_on(ctx)))  # fmt: skip
    answer = await ctx.chat_stream(body)
    if bad := failed(answer):
        return Outcome("fail", f"a {counted or target}-token prompt: {bad.detail}")
    found = "retrieved the needle" if NEEDLE in answer.content else "did not retrieve the needle"
    sizing = f"{counted} tokens (by /tokenize)" if counted else f"~{target} tokens (no /tokenize)"
    ttft = f"{answer.ttft_s:.2f} s" if answer.ttft_s is not None else "n/a"
    return Outcome(
        "pass", f"{sizing} answered, TTFT {ttft}; the model {found}",
        {"prompt_tokens": counted or answer.prompt_tokens, "ttft_s": answer.ttft_s,
         "needle_found": NEEDLE in answer.content},
    )  # fmt: skip


async def check_context_overflow(ctx: Context) -> Outcome:
    """A prompt over max_model_len is refused with 400 and the server stays healthy."""
    limit = ctx.max_model_len
    if limit is None:
        return Outcome("skip", "max_model_len unknown")
    count = await _count(ctx, _needle_prompt(64))
    ratio = 64 / count if count else 1.0
    n_words = round((limit + OVERFLOW_EXTRA_TOKENS) * max(ratio, 1.0) * 1.1)
    answer = await ctx.chat(ctx.body(_messages(_needle_prompt(n_words)), max_tokens=8))
    health = await ctx.get("/health")
    if answer.error_kind != "context_length":
        got = f"{answer.error_kind}: {answer.error}" if answer.error_kind else "an answer"
        return Outcome("fail", f"a prompt over max_model_len {limit} got {got}, not a 400 "
                       "'maximum context length' refusal")  # fmt: skip
    if health.status != 200:
        return Outcome("fail", f"refused with 400, but /health is now {health.status or 'down'}")
    return Outcome("pass", f"refused with 400 ({(answer.error or '')[:60]}...); /health 200")


def _describe_errors(answers: list[ChatAnswer]) -> str:
    kinds = Counter(a.error_kind or "" for a in answers if a.error_kind)
    return ", ".join(f"{_PLAIN_ERRORS.get(k, k)} x{n}" for k, n in kinds.most_common())


MAX_LOG_BYTES = 512 * 2**20
"""The largest engine log validate scans for known issues (`logs analyze` streams any size)."""


def _known(ctx: Context, behaviour: Behaviour) -> tuple[str, list[dict[str, Any]]]:
    """The known issues this behaviour points to, quoting the log when there is one."""
    log = ctx.spec.log_file
    notes, found = [], []
    lines: list[str] = []
    if log is not None:
        try:
            with open_regular(log, fix="pass --log a regular file", max_bytes=MAX_LOG_BYTES) as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except (ServekitError, OSError) as exc:
            notes.append(f"--log not read: {getattr(exc, 'message', None) or exc}")
        for match in match_log_lines(lines, behaviour=behaviour, model=ctx.model or None):
            quote = "; ".join(f"{log.name}:{n}: {text[:160]}" for n, text in match.lines)
            notes.append(f"log: {quote}; known issue {match.issue.id} ({match.issue.title}); "
                         f"fix: {match.issue.fix.summary}")  # fmt: skip
            found.append({"id": match.issue.id, "log_lines": [list(x) for x in match.lines]})
    if not found:
        for issue in known_issues():
            # Without a log, only issues tied to this model are worth naming unasked.
            shows = behaviour in issue.symptoms.behaviours and bool(issue.models)
            if shows and issue.affects(model=ctx.model or None):
                notes.append(f"consistent with known issue {issue.id} ({issue.title}); "
                             f"fix: {issue.fix.summary}")  # fmt: skip
                found.append({"id": issue.id, "log_lines": []})
    return ("; " + " | ".join(notes)) if notes else "", found


async def _burst(ctx: Context, indexes: list[int]) -> list[ChatAnswer]:
    kwargs = thinking_off(thinking_on(ctx))
    bodies = [ctx.body(_messages(ladder_prompt(i)), chat_template_kwargs=kwargs) for i in indexes]
    return list(await asyncio.gather(*(ctx.chat_stream(b) for b in bodies)))


async def ladder_references(ctx: Context, count: int) -> str | None:
    """Greedy answers of the first `count` ladder prompts, one request at a time (kept in
    the context); a failure message if one failed."""
    for index in range(count):
        if index in ctx.references:
            continue
        (answer,) = await _burst(ctx, [index])
        if bad := failed(answer):
            return bad.detail
        ctx.references[index] = answer.content
    return None


async def check_ladder(ctx: Context) -> Outcome:
    """At each level, identical and distinct greedy prompts at once: no errors, /health
    still 200, no garbage; outputs equal the single-request references (else a warning)."""
    levels = sorted(set(ctx.spec.ladder))
    if problem := await ladder_references(ctx, max(levels)):
        return Outcome("fail", f"a single request (concurrency 1) failed: {problem}")
    rows: list[dict[str, Any]] = []
    diverged: list[str] = []
    for level in levels:
        for kind, indexes in (("identical", [0] * level), ("distinct", list(range(level)))):
            if level == 1 and kind == "distinct":
                continue
            answers = await _burst(ctx, indexes)
            health = await ctx.get("/health", timeout_s=10.0)
            errors = [a for a in answers if a.error_kind]
            garbage = [
                reason
                for a in answers
                if not a.error_kind and (reason := garbage_reason(a.content))
            ]
            rows.append({"concurrency": level, "prompts": kind, "errors": len(errors),
                         "garbage": len(garbage), "health": health.status})  # fmt: skip
            now = f"/health now {health.status}" if health.status else "/health unreachable"
            if errors and health.status != 200:
                note, issues = _known(ctx, "crash_under_concurrency")
                return Outcome("fail", f"engine died at concurrency {level}: "
                               f"{_describe_errors(answers)}; {now}{note}",
                               {"levels": rows, "known_issues": issues})  # fmt: skip
            if errors:
                return Outcome("fail", f"{len(errors)} of {level} requests failed at concurrency "
                               f"{level} ({_describe_errors(answers)}); /health still 200",
                               {"levels": rows})  # fmt: skip
            if garbage:
                note, issues = _known(ctx, "garbage_under_concurrency")
                reasons = ", ".join(f"{r} x{n}" for r, n in Counter(garbage).most_common(3))
                return Outcome("fail", f"garbage at concurrency {level} although every response "
                               f"was HTTP 200: {len(garbage)} of {level} outputs ({reasons}){note}",
                               {"levels": rows, "known_issues": issues})  # fmt: skip
            if health.status != 200:
                return Outcome("fail", f"after concurrency {level}: {now}", {"levels": rows})
            for index, answer in zip(indexes, answers, strict=True):
                reference = ctx.references[index]
                if answer.content != reference:
                    where = first_difference(answer.content, reference)
                    diverged.append(f"c={level} prompt {index}: {where}")
    top = max(levels)
    if diverged:
        return Outcome("warn", f"no errors up to concurrency {top}, but {len(diverged)} greedy "
                       f"output(s) differ from the single-request reference, e.g. {diverged[0]}",
                       {"levels": rows, "divergences": diverged})  # fmt: skip
    return Outcome("pass", f"no errors, no garbage, outputs equal the references up to "
                   f"concurrency {top}", {"levels": rows})  # fmt: skip


async def check_spec_decode(ctx: Context) -> Outcome:
    """With speculative decoding: acceptance length within [1, k+1]; with --reference-url,
    greedy outputs identical to the reference server's."""
    if problem := await ladder_references(ctx, 4):  # traffic to measure (reused when present)
        return Outcome("fail", f"a greedy request failed: {problem}")
    after = await scrape(ctx.server)
    block = server_block(ctx.metrics_before, after, {})
    length = block.spec_acceptance_length
    per_position = block.spec_acceptance_per_position
    if after is None or "vllm:spec_decode_num_drafts" not in after.counters:
        return Outcome("skip", "no speculative-decoding counters in /metrics")
    if not isinstance(length, float):
        return Outcome("warn", "speculative decoding is on but proposed no drafts during validate")
    k = len(per_position) if isinstance(per_position, list) else None
    if length < 1 or (k is not None and length > k + 1):
        return Outcome("fail", f"acceptance length {length:.2f} is outside [1, {k}+1]")
    detail = f"acceptance length {length:.2f}" + (f" of at most {k + 1}" if k else "")
    data: dict[str, Any] = {"acceptance_length": length, "num_speculative_tokens": k}
    if ctx.spec.reference_url is None:
        return Outcome("pass", detail, data)
    return await _compare_reference(ctx, detail, data)


async def _compare_reference(ctx: Context, detail: str, data: dict[str, Any]) -> Outcome:
    reference = ctx.spec.reference_url
    assert reference is not None
    other = ctx.server.at(reference, headers=ctx.spec.reference_headers)
    models = await other.models(timeout_s=10.0)
    listed = models.doc.get("data") if isinstance(models.doc, dict) else None
    if not listed:
        return Outcome("fail", f"{detail}; the reference {reference} lists no model")
    own_model = ctx.model
    kwargs = thinking_off(thinking_on(ctx))
    differ = []
    for index, text in sorted(ctx.references.items()):
        ctx.model = str(listed[0].get("id"))
        body = ctx.body(_messages(ladder_prompt(index)), chat_template_kwargs=kwargs)
        ctx.model = own_model
        answer = await ctx.chat_stream(body, at=other)
        if bad := failed(answer):
            return Outcome("fail", f"{detail}; the reference server failed: {bad.detail}")
        if answer.content != text:
            differ.append(f"prompt {index}: {first_difference(text, answer.content)}")
    if differ:
        return Outcome("fail", f"{detail}; {len(differ)} of {len(ctx.references)} greedy outputs "
                       f"differ from the reference without speculation, e.g. {differ[0]}",
                       {**data, "divergences": differ})  # fmt: skip
    return Outcome("pass", f"{detail}; greedy outputs equal the reference's for "
                   f"{len(ctx.references)} prompts", data)  # fmt: skip
