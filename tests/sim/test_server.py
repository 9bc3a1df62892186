"""Loopback tests of `servekit sim serve`: real HTTP against the live simulated server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jsonschema
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from servekit import __version__
from servekit.profiles import load_profile
from servekit.profiles.schema import Profile
from servekit.sim import _handlers
from servekit.sim._live_engine import LiveEngine
from servekit.sim._metrics import ServerMetrics
from servekit.sim.build import build_engine
from servekit.sim.engine import SimRequest
from servekit.sim.faults import Faults
from servekit.sim.server import make_app, make_runner, serve_async
from servekit.sim.textgen import MARKERS
from servekit.sim.tokenizer import count_tokens

pytestmark = pytest.mark.integration

M3 = "minimax-m3-mxfp8-8xa800"
M3_NO_SPEC = "minimax-m3-mxfp8-8xa800-no-eagle3"
LLAMA = "llama-3.1-70b-4xh100"
M3_NAME = "MiniMax-M3-MXFP8"
LLAMA_NAME = "Llama-3.1-70B-Instruct"
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "hourly": {"type": "boolean"},
        "fields": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["location", "unit", "days", "hourly", "fields"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}},
]
STREAM_ALL = {"include_usage": True, "continuous_usage_stats": True}


@functools.cache
def profile(name: str, *overrides: str) -> Profile:
    return load_profile(name, overrides=overrides)


def run(coro: Awaitable[None], timeout_s: float = 60.0) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(coro, timeout_s)

    asyncio.run(bounded())


@contextlib.asynccontextmanager
async def live(
    name: str = M3,
    *,
    time_scale: float = 0.02,
    faults: Faults | None = None,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    overrides: tuple[str, ...] = (),
) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    app = make_app(
        profile(name, *overrides),
        seed=seed,
        time_scale=time_scale,
        faults=faults,
        log=log or (lambda _line: None),
        shutdown_grace_s=0.2,
    )
    runner = make_runner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            yield url, session
    finally:
        await runner.cleanup()


@dataclass
class Stream:
    status: int
    events: list[dict[str, Any]] = field(default_factory=list)
    arrived_s: list[float] = field(default_factory=list)  # per event, since the POST
    done: bool = False
    cut: bool = False
    total_s: float = 0.0  # from the POST to the end of the body

    @property
    def choices(self) -> list[dict[str, Any]]:
        return [e["choices"][0] for e in self.events if e["choices"]]

    def text(self, key: str) -> str:
        return "".join(c["delta"].get(key) or "" for c in self.choices)

    @property
    def token_steps(self) -> list[int]:
        """Tokens per event from continuous usage (completion_tokens deltas)."""
        counts = [e["usage"]["completion_tokens"] for e in self.events if e["choices"]]
        return [b - a for a, b in zip([0, *counts], counts, strict=False)]


async def stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], path: str = "chat/completions"
) -> Stream:
    clock = asyncio.get_running_loop().time
    start = clock()
    async with session.post(f"{url}/v1/{path}", json={**body, "stream": True}) as response:
        result = Stream(response.status)
        try:
            async for raw in response.content:
                line = raw.decode("utf-8").strip()
                if line == "data: [DONE]":
                    result.done = True
                elif line.startswith("data: "):
                    result.events.append(json.loads(line.removeprefix("data: ")))
                    result.arrived_s.append(clock() - start)
        except aiohttp.ClientPayloadError:
            result.cut = True
    result.total_s = clock() - start
    return result


async def post(
    session: aiohttp.ClientSession, url: str, path: str, body: object
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    async with session.post(f"{url}{path}", data=io.BytesIO(data), headers=headers) as response:
        text = await response.text()
        return response.status, json.loads(text) if text else None


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, dict[str, float]]:
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert sample.labels["model_name"] in (M3_NAME, LLAMA_NAME)
            key = sample.labels.get("position", sample.labels.get("le", ""))
            out.setdefault(sample.name, {})[key] = sample.value
    return out


def deliveries(metrics: dict[str, dict[str, float]]) -> int:
    """Engine deliveries (streamed chunks) observed: first tokens plus inter-token gaps."""
    ttft = metrics["vllm:time_to_first_token_seconds_count"][""]
    return int(ttft + metrics["vllm:inter_token_latency_seconds_count"][""])


def chat(content: str = "Tell me about serving.", **extra: Any) -> dict[str, Any]:
    return {"model": M3_NAME, "messages": [{"role": "user", "content": content}], **extra}


def no_markers(*texts: str) -> bool:
    return not any(marker in text for marker in MARKERS for text in texts)


def test_streamed_chat_counts_every_token_and_reasons_first() -> None:
    """Per-chunk usage deltas sum to completion_tokens == max_tokens; reasoning precedes content."""

    async def body() -> None:
        async with live() as (url, session):
            s = await stream(session, url, chat(max_tokens=40, stream_options=STREAM_ALL))
        assert s.status == 200
        assert s.done
        assert not s.cut
        assert s.choices[0]["delta"] == {"role": "assistant", "content": ""}
        final = s.events[-1]
        assert final["choices"] == []
        assert final["usage"]["completion_tokens"] == 40
        assert sum(s.token_steps) == 40
        assert s.choices[-1]["finish_reason"] == "length"
        assert all(c["finish_reason"] is None for c in s.choices[:-1])
        kinds = [k for c in s.choices for k in c["delta"] if k in ("reasoning", "content")]
        first_content = kinds.index("content", 1)
        assert set(kinds[1:first_content]) == {"reasoning"}
        assert "reasoning" not in kinds[first_content:]
        reasoning, content = s.text("reasoning"), s.text("content")
        assert count_tokens(reasoning) == 10
        assert count_tokens(content) == 30
        assert no_markers(reasoning, content)
        assert {e["object"] for e in s.events} == {"chat.completion.chunk"}
        assert {e["model"] for e in s.events} == {M3_NAME}

    run(body())


def test_speculative_decoding_sends_multi_token_chunks() -> None:
    """With EAGLE3 some chunks carry several tokens; without it every chunk carries one."""

    async def body() -> None:
        request = chat(max_tokens=60, stream_options=STREAM_ALL)
        async with live(M3) as (url, session):
            spec = await stream(session, url, request)
        async with live(M3_NO_SPEC) as (url, session):
            plain = await stream(session, url, request)
        assert max(spec.token_steps) > 1
        assert max(spec.token_steps) <= 4
        assert set(plain.token_steps[1:]) == {1}
        assert sum(spec.token_steps) == sum(plain.token_steps) == 60

    run(body())


def test_whole_chat_answer_has_reasoning_content_and_usage() -> None:
    """A non-streamed answer carries message.reasoning, message.content and usage."""

    async def body() -> None:
        async with live() as (url, session):
            status, doc = await post(session, url, "/v1/chat/completions", chat(max_tokens=20))
            _, quiet = await post(
                session,
                url,
                "/v1/chat/completions",
                chat(max_tokens=20, chat_template_kwargs={"thinking_mode": "disabled"}),
            )
        assert status == 200
        assert doc["object"] == "chat.completion"
        message = doc["choices"][0]["message"]
        assert count_tokens(message["reasoning"]) == 5
        assert count_tokens(message["content"]) == 15
        assert message["tool_calls"] == []
        assert no_markers(message["reasoning"], message["content"])
        assert doc["usage"]["completion_tokens"] == 20
        assert doc["choices"][0]["finish_reason"] == "length"
        assert quiet["choices"][0]["message"]["reasoning"] is None
        assert count_tokens(quiet["choices"][0]["message"]["content"]) == 20

    run(body())


def test_model_without_reasoning_parser_never_reasons() -> None:
    """A profile without a reasoning parser ignores thinking_mode."""

    async def body() -> None:
        request = chat(max_tokens=12, chat_template_kwargs={"thinking_mode": "enabled"})
        request["model"] = "Llama-3.1-70B-Instruct"
        async with live(LLAMA) as (url, session):
            _, doc = await post(session, url, "/v1/chat/completions", request)
        assert doc["choices"][0]["message"]["reasoning"] is None
        assert count_tokens(doc["choices"][0]["message"]["content"]) == 12

    run(body())


def test_answer_without_max_tokens_ends_with_stop() -> None:
    """Without max_tokens the answer has the default length and finish_reason "stop"."""

    async def body() -> None:
        async with live() as (url, session):
            _, doc = await post(session, url, "/v1/chat/completions", chat(min_tokens=300))
        assert doc["choices"][0]["finish_reason"] == "stop"
        assert doc["usage"]["completion_tokens"] == 300
        assert doc["choices"][0]["message"]["content"].endswith(".")

    run(body())


def test_completions_endpoint_streams_and_answers_whole() -> None:
    """/v1/completions streams text chunks with usage and answers whole (default 16 tokens)."""

    async def body() -> None:
        request = {"model": M3_NAME, "prompt": "Once upon a time"}
        async with live() as (url, session):
            s = await stream(
                session,
                url,
                {**request, "max_tokens": 25, "stream_options": STREAM_ALL},
                "completions",
            )
            status, doc = await post(session, url, "/v1/completions", request)
            _, ids = await post(session, url, "/v1/completions", {"prompt": [1, 2, 3]})
        assert s.done
        assert sum(s.token_steps) == 25
        assert s.events[-1]["usage"]["prompt_tokens"] == 4
        assert {e["object"] for e in s.events} == {"text_completion"}
        assert count_tokens("".join(c["text"] for c in s.choices)) == 25
        assert status == 200
        assert doc["usage"]["completion_tokens"] == 16
        assert count_tokens(doc["choices"][0]["text"]) == 16
        assert ids["usage"]["prompt_tokens"] == 3

    run(body())


def test_tool_calls_satisfy_the_schema_streamed_and_whole() -> None:
    """Tool-call arguments (streamed pieces or whole) validate against the tool's schema."""

    async def body() -> None:
        ask = chat(
            "What is the weather in Paris?",
            max_tokens=200,
            tools=TOOLS,
            temperature=0,
            stream_options=STREAM_ALL,
        )
        async with live() as (url, session):
            s = await stream(session, url, {**ask, "tool_choice": "auto"})
            _, doc = await post(session, url, "/v1/chat/completions", ask)
            _, named = await post(
                session,
                url,
                "/v1/chat/completions",
                {**ask, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
            )
            _, none = await post(
                session, url, "/v1/chat/completions", {**ask, "tool_choice": "none"}
            )
        calls = [c["delta"]["tool_calls"][0] for c in s.choices if "tool_calls" in c["delta"]]
        assert calls[0]["id"]
        assert calls[0]["type"] == "function"
        assert calls[0]["index"] == 0
        assert calls[0]["function"]["name"] == "get_weather"
        arguments = "".join(c["function"]["arguments"] for c in calls)
        jsonschema.validate(json.loads(arguments), WEATHER_SCHEMA)
        assert s.choices[-1]["finish_reason"] == "tool_calls"
        assert s.events[-1]["usage"]["completion_tokens"] == sum(s.token_steps) < 200
        assert s.text("content") == ""
        assert s.text("reasoning")
        call = doc["choices"][0]["message"]["tool_calls"][0]
        assert json.loads(call["function"]["arguments"]) == json.loads(arguments)  # greedy
        assert doc["choices"][0]["message"]["content"] is None
        assert named["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time"
        assert none["choices"][0]["message"]["tool_calls"] == []
        assert none["choices"][0]["finish_reason"] == "length"

    run(body())


def test_tool_result_follow_up_gets_a_text_answer() -> None:
    """After a role=tool message the model answers in text."""

    async def body() -> None:
        messages = [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
        ]
        async with live() as (url, session):
            _, doc = await post(
                session,
                url,
                "/v1/chat/completions",
                {"messages": messages, "tools": TOOLS, "max_tokens": 16},
            )
        message = doc["choices"][0]["message"]
        assert message["tool_calls"] == []
        assert count_tokens(message["content"]) == 12

    run(body())


def test_auto_tool_choice_needs_the_server_flag() -> None:
    """Like vLLM, "auto" tool choice without --enable-auto-tool-choice is a 400."""

    async def body() -> None:
        async with live(overrides=("enable_auto_tool_choice=false",)) as (url, session):
            status, doc = await post(session, url, "/v1/chat/completions", chat(tools=TOOLS))
        assert status == 400
        assert "--enable-auto-tool-choice" in doc["error"]["message"]

    run(body())


def test_models_health_and_version() -> None:
    """/v1/models names the served model and max_model_len; /health 200; /version."""

    async def body() -> None:
        async with live() as (url, session):
            async with session.get(f"{url}/v1/models") as response:
                models = await response.json()
            async with session.get(f"{url}/health") as response:
                health = response.status
            async with session.get(f"{url}/version") as response:
                version = await response.json()
        assert models["object"] == "list"
        card = models["data"][0]
        assert (card["id"], card["object"], card["max_model_len"]) == (M3_NAME, "model", 131072)
        assert health == 200
        assert version == {"version": f"servekit-sim {__version__}"}

    run(body())


def test_tokenize_matches_prompt_tokens_and_detokenize_round_trips() -> None:
    """/tokenize of messages counts what usage.prompt_tokens reports; /detokenize inverts it."""

    async def body() -> None:
        request = chat("Explain paged attention, briefly!", max_tokens=4)
        async with live() as (url, session):
            _, tok = await post(session, url, "/tokenize", {"messages": request["messages"]})
            _, doc = await post(session, url, "/v1/chat/completions", request)
            _, text = await post(session, url, "/tokenize", {"prompt": "Héllo, wörld!"})
            _, back = await post(session, url, "/detokenize", {"tokens": text["tokens"]})
            status, bad = await post(session, url, "/detokenize", {"tokens": [7]})
            both, _ = await post(session, url, "/tokenize", {})
        assert tok["count"] == len(tok["tokens"]) == doc["usage"]["prompt_tokens"]
        assert tok["max_model_len"] == 131072
        assert back == {"prompt": "Héllo, wörld!"}
        assert status == 400
        assert "not in the simulator's vocabulary" in bad["error"]["message"]
        assert both == 400

    run(body())


def test_metrics_expose_vllm_series_and_spec_decode_counters_grow() -> None:
    """/metrics parses as Prometheus text with vLLM's series; spec-decode counters grow."""

    async def body() -> None:
        async with live() as (url, session):
            before = await scrape(session, url)
            await asyncio.gather(
                *(stream(session, url, chat(f"q{i}", max_tokens=30)) for i in range(4))
            )
            after = await scrape(session, url)
        for gauge in ("running", "waiting"):
            assert f"vllm:num_requests_{gauge}" in after
        assert "vllm:kv_cache_usage_perc" in after
        assert "vllm:num_preemptions_total" in after
        assert after["vllm:generation_tokens_total"][""] == 120
        assert after["vllm:prompt_tokens_total"][""] > 0
        for series in ("drafts", "draft_tokens", "accepted_tokens"):
            name = f"vllm:spec_decode_num_{series}_total"
            assert after[name][""] > before[name][""] == 0
        per_pos = after["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
        assert set(per_pos) == {"0", "1", "2"}
        assert sum(per_pos.values()) == after["vllm:spec_decode_num_accepted_tokens_total"][""]
        assert after["vllm:time_to_first_token_seconds_count"][""] == 4
        assert after["vllm:inter_token_latency_seconds_count"][""] > 0

    run(body())


def test_request_over_max_model_len_is_vllms_400() -> None:
    """prompt + max_tokens over max_model_len gives vLLM's 400 message and shape."""

    async def body() -> None:
        request = chat("hi", max_tokens=32768)
        request["model"] = "Llama-3.1-70B-Instruct"
        async with live(LLAMA) as (url, session):
            _, tok = await post(session, url, "/tokenize", {"messages": request["messages"]})
            status, doc = await post(session, url, "/v1/chat/completions", request)
        p = tok["count"]
        assert status == 400
        assert doc == {
            "error": {
                "message": f"This model's maximum context length is 32768 tokens. However, you "
                f"requested {p + 32768} tokens ({p} in the messages, 32768 in the completion). "
                "Please reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        }

    run(body())


@pytest.mark.parametrize(
    ("payload", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "body"),
        ({"model": M3_NAME}, 400, "messages: Field required"),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role"),
        (chat(n=2), 400, "n must be 1"),
        (chat(max_tokens=0), 400, "max_tokens"),
        (chat(max_tokens=5, min_tokens=9), 400, "min_tokens (9)"),
        (chat(temperature=-1), 400, "temperature"),
        (
            chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "x"}}),
            400,
            "'x'",
        ),
        ({**chat(), "model": "gpt-4"}, 404, "The model `gpt-4` does not exist."),
        (b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}', 400, "lone UTF-16 surrogate"),
        (b'{"messages": [{"role": "user", "content": "x"}], "temperature": 1e999}', 400, "finite"),
        (b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', 400, "finite"),
        (chat(tool_choice="required"), 400, "When using `tool_choice`, `tools` must be set."),
        (
            chat(tool_choice={"type": "function", "function": {"name": "get_time"}}),
            400,
            "When using `tool_choice`, `tools` must be set.",
        ),
    ],
)
def test_bad_requests_get_clear_json_errors(payload: object, status: int, needle: str) -> None:
    """Malformed bodies and missing fields are 400s (unknown model 404), never tracebacks."""

    async def body() -> None:
        logs: list[str] = []
        async with live(log=logs.append) as (url, session):
            got, doc = await post(session, url, "/v1/chat/completions", payload)
        assert got == status
        assert set(doc) == {"error"}
        assert set(doc["error"]) == {"message", "type", "param", "code"}
        assert doc["error"]["code"] == status
        assert needle in doc["error"]["message"]
        assert "Traceback" not in doc["error"]["message"]
        assert logs == []

    run(body())


def test_greedy_output_is_the_same_at_concurrency_1_and_16() -> None:
    """Temperature-0 text depends on the prompt only, not on batching or timing."""

    async def body() -> None:
        prompts = [f"Question number {i}" for i in range(16)]

        async def ask(session: aiohttp.ClientSession, url: str, p: str) -> str:
            s = await stream(session, url, chat(p, max_tokens=24, temperature=0))
            return s.text("reasoning") + "|" + s.text("content")

        async with live() as (url, session):
            alone = [await ask(session, url, p) for p in prompts]
        async with live(seed=7) as (url, session):
            together = await asyncio.gather(*(ask(session, url, p) for p in prompts))
        assert alone == list(together)
        assert len(set(alone)) == 16

    run(body())


def test_sampled_output_follows_the_request_seed() -> None:
    """Temperature > 0 mixes the request seed in: same seed same text, other seed other text."""

    async def body() -> None:
        async with live() as (url, session):
            texts = []
            for seed in (1, 1, 2):
                _, doc = await post(
                    session,
                    url,
                    "/v1/chat/completions",
                    chat(max_tokens=10, temperature=0.8, seed=seed),
                )
                texts.append(doc["choices"][0]["message"]["content"])
        assert texts[0] == texts[1] != texts[2]

    run(body())


def test_two_hundred_concurrent_streams_complete() -> None:
    """200 concurrent streams all finish with their full token count and [DONE]."""

    async def body() -> None:
        async with live(time_scale=0.05) as (url, session):
            streams = await asyncio.gather(
                *(
                    stream(session, url, chat(f"p{i}", max_tokens=16, stream_options=STREAM_ALL))
                    for i in range(200)
                )
            )
        assert all(s.done and not s.cut for s in streams)
        assert all(s.events[-1]["usage"]["completion_tokens"] == 16 for s in streams)

    run(body())


def test_crash_at_concurrency_kills_the_engine() -> None:
    """At the crash concurrency streams are cut, then 500s, /health 503, and logs say why."""

    async def body() -> None:
        logs: list[str] = []
        async with live(time_scale=0.1, faults=Faults(crash_at_concurrency=2), log=logs.append) as (
            url,
            session,
        ):
            alone = await stream(session, url, chat(max_tokens=20))
            pair = await asyncio.gather(
                *(stream(session, url, chat(f"c{i}", max_tokens=100)) for i in range(2))
            )
            status, doc = await post(session, url, "/v1/chat/completions", chat(max_tokens=5))
            async with session.get(f"{url}/health") as response:
                health = response.status
        assert alone.done
        assert not alone.cut
        assert all(s.cut and not s.done for s in pair)
        assert status == 500
        assert "EngineCore encountered a fatal error" in doc["error"]["message"]
        assert health == 503
        assert "RuntimeError: CUDA error: an illegal memory access was encountered" in logs
        assert any("EngineCore encountered a fatal error" in line for line in logs)

    run(body())


def test_corrupt_at_concurrency_streams_garbage_with_status_200() -> None:
    """Below the threshold text is clean; batched at it, text turns to NUL and U+FFFD."""

    async def body() -> None:
        async with live(time_scale=0.05, faults=Faults(corrupt_at_concurrency=4)) as (url, session):
            alone = await stream(session, url, chat(max_tokens=30))
            batch = await asyncio.gather(
                *(stream(session, url, chat(f"g{i}", max_tokens=60)) for i in range(4))
            )
        clean = alone.text("reasoning") + alone.text("content")
        assert "\x00" not in clean
        assert "\ufffd" not in clean
        for s in batch:
            text = s.text("reasoning") + s.text("content")
            assert s.status == 200
            assert s.done
            assert "\x00" in text
            assert "\ufffd\ufffd" in text

    run(body())


def test_drop_stream_cuts_streams_at_random_points() -> None:
    """drop-stream=1 cuts every stream; 0.5 cuts some; whole answers are never cut."""

    async def body() -> None:
        async with live(faults=Faults(drop_stream_p=1.0)) as (url, session):
            always = [await stream(session, url, chat(max_tokens=30)) for _ in range(3)]
            status, _ = await post(session, url, "/v1/chat/completions", chat(max_tokens=5))
        async with live(faults=Faults(drop_stream_p=0.5)) as (url, session):
            some = await asyncio.gather(
                *(stream(session, url, chat(max_tokens=30)) for _ in range(20))
            )
        assert all(s.cut and not s.done for s in always)
        assert status == 200
        cut = sum(s.cut for s in some)
        assert 0 < cut < 20
        assert all(s.done for s in some if not s.cut)

    run(body())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_slow_start_refuses_then_answers_503_then_is_ready() -> None:
    """slow-start: connection refused for S x time_scale, then /health 503 a while, then 200."""

    async def body() -> None:
        port, stop, announced = _free_port(), asyncio.Event(), []
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = asyncio.create_task(
            serve_async(
                profile(M3),
                stop=stop,
                port=port,
                time_scale=0.1,
                faults=Faults(slow_start_s=5),
                announce=announced.append,
                log=lambda _line: None,
            )
        )
        seen: list[tuple[str, float]] = []
        async with aiohttp.ClientSession() as session:
            while not seen or seen[-1][0] != "200":
                try:
                    async with session.get(f"http://127.0.0.1:{port}/health") as response:
                        state = str(response.status)
                except aiohttp.ClientConnectorError:
                    state = "refused"
                if not seen or seen[-1][0] != state:
                    seen.append((state, loop.time() - started))
                await asyncio.sleep(0.01)
        stop.set()
        await task
        assert [state for state, _ in seen] == ["refused", "503", "200"]
        assert seen[1][1] >= 0.45
        assert seen[2][1] - seen[1][1] >= 0.05
        assert announced == [f"servekit sim: serving {M3} on http://127.0.0.1:{port}"]

    run(body())


async def _cli(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "servekit",
        "sim",
        "serve",
        "--profile",
        M3,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def test_oom_at_startup_exits_non_zero_without_listening() -> None:
    """oom-at-startup prints torch's CUDA OOM message and exits 1 without serving."""

    async def body() -> None:
        process = await _cli("--port", "0", "--fault", "oom-at-startup")
        _, err = await process.communicate()
        text = err.decode()
        assert process.returncode == 1
        assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in text
        assert "serving" not in text
        assert "servekit: error:" in text

    run(body())


async def _announced(process: asyncio.subprocess.Process) -> str:
    """The CLI's `servekit sim: serving ...` line, after the startup log before it."""
    assert process.stderr is not None
    for _ in range(100):
        line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode().strip()
        if line.startswith("servekit sim: serving"):
            return line
    raise AssertionError("the simulator never announced its URL")


def test_cli_serves_crashes_at_concurrency_and_stops_on_sigterm() -> None:
    """The CLI announces its URL, crashes at the fault's concurrency, logs why, exits 0 on TERM."""

    async def body() -> None:
        process = await _cli(
            "--port", "0", "--time-scale", "0.1", "--fault", "crash-at-concurrency=2"
        )
        line = await _announced(process)
        assert line.startswith(f"servekit sim: serving {M3} on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/health") as response:
                assert response.status == 200
            pair = await asyncio.gather(
                *(stream(session, url, chat(f"c{i}", max_tokens=100)) for i in range(2))
            )
            async with session.get(f"{url}/health") as response:
                assert response.status == 503
        assert all(s.cut for s in pair)
        process.send_signal(signal.SIGTERM)
        _, rest = await process.communicate()
        assert process.returncode == 0
        assert "RuntimeError: CUDA error: an illegal memory access was encountered" in rest.decode()
        assert "EngineCore encountered a fatal error" in rest.decode()

    run(body())


def test_empty_prompt_is_refused_and_never_hangs() -> None:
    """An empty prompt is vLLM's 400 at once, and the server keeps answering afterwards."""

    async def body() -> None:
        async with live() as (url, session):
            refused = [
                await post(session, url, "/v1/completions", {"prompt": prompt, "max_tokens": 1})
                for prompt in ("", [""])
            ]
            status, doc = await post(
                session, url, "/v1/completions", {"prompt": "hi", "max_tokens": 1}
            )
        for got, error in refused:
            assert got == 400
            assert error["error"]["message"] == "The decoder prompt cannot be empty"
        assert status == 200
        assert doc["usage"]["completion_tokens"] == 1

    run(body(), timeout_s=20)


def test_a_step_that_computes_nothing_still_delivers_its_token() -> None:
    """The driver delivers tokens sampled in an empty (zero-token prefill) step: none dropped."""

    async def body() -> None:
        engine = build_engine(profile(M3_NO_SPEC), seed=0)
        driven = LiveEngine(
            engine,
            time_scale=0.01,
            faults=Faults(),
            metrics=ServerMetrics(engine, M3_NAME),
            log=lambda _line: None,
        )
        driver = asyncio.create_task(driven.run())
        try:
            ticket = driven.submit("empty", 0, 3, 0.0)
            got = [await asyncio.wait_for(ticket.queue.get(), 5) for _ in range(3)]
        finally:
            driver.cancel()
        assert [(d.tokens, d.finished) for d in got] == [(1, False), (1, False), (1, True)]

    run(body(), timeout_s=20)


def test_live_clock_does_not_drift_late() -> None:
    """A 400-token stream at time scale 0.05 lasts its summed step durations x 0.05 (within 10%)."""

    async def body() -> None:
        request = chat("Time me.", max_tokens=400, stream_options=STREAM_ALL)
        async with live(M3_NO_SPEC, time_scale=0.05) as (url, session):
            s = await stream(session, url, request)
            metrics = await scrape(session, url)
        engine = build_engine(profile(M3_NO_SPEC), seed=0)
        engine.add(SimRequest("same", s.events[-1]["usage"]["prompt_tokens"], 400))
        steps_s = 0.0
        while not engine.idle:
            steps_s += engine.step().duration_s
        observed_s = (
            metrics["vllm:time_to_first_token_seconds_sum"][""]
            + metrics["vllm:inter_token_latency_seconds_sum"][""]
        )
        assert s.done
        assert observed_s == pytest.approx(steps_s, rel=1e-9)  # metrics on the simulated clock
        assert s.total_s == pytest.approx(steps_s * 0.05, rel=0.10)

    run(body())


def test_each_engine_step_is_one_sse_event() -> None:
    """A step that crosses from reasoning to content or a tool call is one event carrying both."""

    async def body() -> None:
        async with live(M3) as (url, session):
            streams = [
                await stream(session, url, chat(f"q{n}", max_tokens=n, stream_options=STREAM_ALL))
                for n in range(20, 36)
            ]
            for n in range(8):
                ask = chat(f"Weather in Paris, day {n}?", tools=TOOLS, stream_options=STREAM_ALL)
                streams.append(await stream(session, url, ask))
            metrics = await scrape(session, url)
        events = [choice for s in streams for choice in s.choices[1:]]  # after the role chunk
        assert len(events) == deliveries(metrics)
        assert all(step >= 1 for s in streams for step in s.token_steps[1:])
        crossing = [e["delta"] for e in events if "reasoning" in e["delta"] and len(e["delta"]) > 1]
        assert {"content", "tool_calls"} <= {key for delta in crossing for key in delta}

    run(body())


def test_role_chunk_arrives_with_the_first_token() -> None:
    """The role chunk is sent with the first engine output, so the first event marks TTFT."""

    async def body() -> None:
        async with live(M3_NO_SPEC, time_scale=0.1) as (url, session):
            s = await stream(session, url, chat(" word" * 30_000, max_tokens=3))
            metrics = await scrape(session, url)
        ttft_wall_s = metrics["vllm:time_to_first_token_seconds_sum"][""] * 0.1
        assert ttft_wall_s > 0.1
        assert s.choices[0]["delta"] == {"role": "assistant", "content": ""}
        assert s.arrived_s[0] >= 0.9 * ttft_wall_s
        assert s.arrived_s[1] - s.arrived_s[0] < 0.005

    run(body())


@pytest.mark.parametrize(
    ("options", "final", "per_chunk"),
    [
        (None, False, False),
        ({}, True, False),
        ({"include_usage": True}, True, False),
        ({"continuous_usage_stats": True}, True, True),
        ({"include_usage": False, "continuous_usage_stats": True}, False, False),
        ({"include_usage": None}, False, False),
        (STREAM_ALL, True, True),
    ],
)
def test_stream_options_follow_vllms_usage_rule(
    options: dict[str, Any] | None, final: bool, per_chunk: bool
) -> None:
    """Final usage needs include_usage (true by default inside stream_options); per-chunk both."""

    async def body() -> None:
        extra = {} if options is None else {"stream_options": options}
        async with live() as (url, session):
            streams = [
                await stream(session, url, chat(max_tokens=8, **extra)),
                await stream(
                    session, url, {"prompt": "hi", "max_tokens": 8, **extra}, "completions"
                ),
            ]
        for s in streams:
            assert s.done
            finals = [e for e in s.events if not e["choices"]]
            assert [e["usage"]["completion_tokens"] for e in finals] == [8] * final
            assert {"usage" in e for e in s.events if e["choices"]} == {per_chunk}

    run(body())


def test_null_sampling_fields_mean_their_defaults() -> None:
    """temperature, n, stream, ignore_eos and min_tokens sent as null take their defaults."""

    async def body() -> None:
        nulls = dict.fromkeys(("temperature", "n", "stream", "ignore_eos", "min_tokens"))
        async with live() as (url, session):
            status, doc = await post(
                session, url, "/v1/chat/completions", chat(max_tokens=3, **nulls)
            )
        assert status == 200
        assert doc["object"] == "chat.completion"
        assert doc["usage"]["completion_tokens"] == 3

    run(body())


def test_oversized_prompts_are_refused_before_tokenizing() -> None:
    """A prompt past max_model_len x 32 characters is a 400; a body over 16 MiB a JSON 413."""

    async def body() -> None:
        async with live(LLAMA) as (url, session):
            status, doc = await post(
                session, url, "/v1/completions", {"prompt": "word " * 220_000, "max_tokens": 1}
            )
            huge = io.BytesIO(json.dumps({"prompt": "x " * (9 * 1024**2)}).encode())
            async with session.post(f"{url}/v1/completions", data=huge) as response:
                big, too_big = response.status, await response.json()
        assert status == 400
        assert doc["error"]["message"].startswith(
            "This model's maximum context length is 32768 tokens. However, your request has "
            "1100000 characters"
        )
        assert big == 413
        assert too_big["error"]["code"] == 413
        assert "16 MiB" in too_big["error"]["message"]

    run(body())


def test_tokenize_cache_cap_holds_per_insertion(monkeypatch: pytest.MonkeyPatch) -> None:
    """One /tokenize request cannot grow the id table past its cap."""
    monkeypatch.setattr(_handlers, "_KNOWN_PIECES_MAX", 10)

    async def body() -> None:
        text = " ".join(f"zq{i}" for i in range(50))
        async with live() as (url, session):
            _, tok = await post(session, url, "/tokenize", {"prompt": text})
            kept, _ = await post(session, url, "/detokenize", {"tokens": tok["tokens"][:10]})
            dropped, _ = await post(session, url, "/detokenize", {"tokens": tok["tokens"][10:11]})
        assert tok["count"] == 50
        assert (kept, dropped) == (200, 400)

    run(body())


async def _running(session: aiohttp.ClientSession, url: str, want: int, within_s: float) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + within_s
    while loop.time() < end:
        if (await scrape(session, url))["vllm:num_requests_running"][""] == want:
            return True
        await asyncio.sleep(0.01)
    return False


def test_a_disconnected_whole_request_is_aborted_in_the_engine() -> None:
    """Closing the client of a non-streamed request cancels its handler and aborts the request."""

    async def body() -> None:
        async with live(time_scale=1.0) as (url, session):
            async with aiohttp.ClientSession() as other:
                task = asyncio.create_task(
                    post(other, url, "/v1/chat/completions", chat(max_tokens=100_000))
                )
                assert await _running(session, url, 1, within_s=5)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            assert await _running(session, url, 0, within_s=2)

    run(body())


def test_sigterm_with_open_requests_exits_within_two_seconds() -> None:
    """SIGTERM cuts open streams and whole requests after a short grace; exit 0 in ~2 s."""

    async def body() -> None:
        process = await _cli("--port", "0")
        assert process.stderr is not None
        line = await _announced(process)
        url = line.rsplit(" ", 1)[1]
        loop = asyncio.get_running_loop()
        async with aiohttp.ClientSession() as session:
            pending = [
                *(stream(session, url, chat(f"s{i}", max_tokens=50_000)) for i in range(3)),
                post(session, url, "/v1/chat/completions", chat(max_tokens=50_000)),
            ]
            tasks = [asyncio.create_task(p) for p in pending]
            assert await _running(session, url, 4, within_s=10)
            started = loop.time()
            process.send_signal(signal.SIGTERM)
            await process.communicate()
            elapsed_s = loop.time() - started
            results = await asyncio.gather(*tasks, return_exceptions=True)
        assert process.returncode == 0
        assert elapsed_s < 2.5
        assert all(isinstance(r, Stream) and r.cut and not r.done for r in results[:3])
        assert isinstance(results[3], aiohttp.ClientError)

    run(body())
