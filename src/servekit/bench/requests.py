"""What a load test sends (shell): request bodies, every request of a run planned in order,
the one probe of whether the server returns token ids per streamed chunk, and the record
each timed stream becomes (`to_record`).

Bodies ask for usage on every chunk (`continuous_usage_stats`) and, when the probe found
the server honours it, for `return_token_ids`: vLLM then puts each chunk's token ids in
it (also on chunks whose text is empty, and on chunks a reasoning or tool parser would
otherwise hold back), which makes the tokens per chunk exact (`client/stream.py`).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from servekit.bench.replay import block_tokens_of, trace_prompts
from servekit.bench.sizing import sized_prompts
from servekit.bench.spec import BenchSpec, Planned
from servekit.client.endpoint import Endpoint
from servekit.client.http import TimedStream
from servekit.client.stream import TOKEN_IDS
from servekit.records import RequestRecord
from servekit.workload.traces import Trace

PROBE_TIMEOUT_S = 30.0
"""The most the token-ids probe may take (one request of two tokens)."""


async def probe_token_ids(endpoint: Endpoint, spec: BenchSpec) -> bool:
    """Whether the server streams `token_ids` on its chunks when a request asks for them
    (`return_token_ids`): one request of at most two tokens. Any refusal or failure means
    no (a server that refuses unknown fields answers 400), and the run goes on without."""
    plain = dataclasses.replace(spec, tools=(), chat_template_kwargs=None, min_tokens=False)
    body = request_body(plain, "Hello", 2, token_ids=True)
    timed = await endpoint.stream(api_path(spec), body, timeout_s=min(spec.timeout_s,
                                  PROBE_TIMEOUT_S))  # fmt: skip
    return timed.status == 200 and timed.result.token_source == TOKEN_IDS


def request_body(
    spec: BenchSpec,
    prompt: str | None,
    output_len: int,
    messages: Any = None,
    *,
    token_ids: bool | None = None,
) -> dict[str, Any]:
    """The streaming request body: exact output length, usage on every chunk, token ids
    per chunk when `token_ids` (default: `spec.token_ids`) is true.

    The length is pinned with `max_tokens` + `ignore_eos` (as vLLM's own benchmark does);
    `min_tokens` is added only with `BenchSpec.min_tokens`, since on vLLM it adds a logits
    processor to every step. A server that ignores the pin is caught by the length check.
    """
    body: dict[str, Any] = {
        "model": spec.model,
        "max_tokens": output_len,
        "ignore_eos": True,
        "temperature": spec.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if spec.token_ids if token_ids is None else token_ids:
        body["return_token_ids"] = True
    if spec.min_tokens:
        body["min_tokens"] = output_len
    if spec.api == "chat":
        body["messages"] = (
            list(messages) if messages is not None else [{"role": "user", "content": prompt}]
        )
        if spec.chat_template_kwargs is not None:
            body["chat_template_kwargs"] = spec.chat_template_kwargs
        if spec.tools:
            body["tools"] = list(spec.tools)
            body["tool_choice"] = "auto"
    else:
        if prompt is None:  # chat messages sent to /v1/completions: join their text
            prompt = "\n".join(str(m.get("content", "")) for m in messages or ())
        body["prompt"] = prompt
    return body


async def plan_requests(
    endpoint: Endpoint, spec: BenchSpec, count: int, rng: random.Random
) -> tuple[list[Planned], str]:
    """Every request of the run, in order (from the dataset, or synthetic and sized), and
    how the prompts' lengths were counted."""
    if spec.trace is not None:
        return await _plan_trace(endpoint, spec, spec.trace, count, rng)
    outputs = [
        spec.output_dist.draw(rng) if spec.output_dist else spec.output_len for _ in range(count)
    ]
    if spec.dataset:
        items = [spec.dataset[i % len(spec.dataset)] for i in range(count)]
        rng.shuffle(items)
        return [
            Planned(
                request_body(spec, it.prompt, it.output_len or out, it.messages),
                it.output_len or out,
            )
            for it, out in zip(items, outputs, strict=True)
        ], "dataset"
    lengths = [
        spec.input_dist.draw(rng) if spec.input_dist else spec.input_len for _ in range(count)
    ]
    prompts, method = await sized_prompts(endpoint, spec, lengths, rng)
    return [
        Planned(request_body(spec, p, out), out) for p, out in zip(prompts, outputs, strict=True)
    ], method


async def _plan_trace(
    endpoint: Endpoint, spec: BenchSpec, trace: Trace, count: int, rng: random.Random
) -> tuple[list[Planned], str]:
    """A replay's requests: distinct synthetic warmup requests (they must not warm the
    trace's prefixes), then the trace's, each prompt sized to its input length."""
    warmup = max(count - len(trace.requests), 0)
    requests = trace.requests[: count - warmup]
    warm, _ = (
        await plan_requests(endpoint, dataclasses.replace(spec, trace=None), warmup, rng)
        if warmup
        else ([], "")
    )
    sized = await trace_prompts(endpoint, spec, requests, block_tokens_of(trace))
    method = sized.method
    if sized.problems:  # never silently: the summary names the requests
        method += f"; {len(sized.problems)} prompt(s) not exact, e.g. {sized.problems[0]}"
    return warm + [
        Planned(request_body(spec, prompt, r.output_len), r.output_len)
        for prompt, r in zip(sized.prompts, requests, strict=True)
    ], method


def api_path(spec: BenchSpec) -> str:
    """The path requests go to: chat completions or completions."""
    return f"/v1/{'chat/completions' if spec.api == 'chat' else 'completions'}"


def to_record(rid: str, point: str, scheduled_ns: int, timed: TimedStream) -> RequestRecord:
    """Turn one timed stream into its record."""
    r = timed.result
    ok = r.error_kind is None
    return RequestRecord(
        id=rid,
        point=point,
        scheduled_ns=scheduled_ns,
        sent_ns=timed.sent_ns,
        first_token_ns=r.first_token_ns,
        first_answer_ns=r.first_answer_ns,
        end_ns=timed.end_ns,
        chunk_ns=tuple(r.chunk_ns),
        chunk_tokens=tuple(r.chunk_tokens),
        text_chunks=r.text_chunks,
        token_source=r.token_source,
        prompt_tokens=r.prompt_tokens or 0,
        output_tokens=(r.completion_tokens or sum(r.chunk_tokens)) if ok else 0,
        cached_tokens=r.cached_tokens,
        reasoning_tokens=r.reasoning_tokens,
        finish_reason=r.finish_reason,
        error_kind=r.error_kind,
        error=r.error,
    )
