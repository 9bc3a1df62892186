"""Loopback tests of `servekit sim serve`: real HTTP against the live simulated server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
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
from servekit.sim.faults import Faults
from servekit.sim.server import make_app, serve_async
from servekit.sim.textgen import MARKERS, count_tokens

pytestmark = pytest.mark.integration

M3 = "minimax-m3-mxfp8-8xa800"
M3_NO_SPEC = "minimax-m3-mxfp8-8xa800-no-eagle3"
LLAMA = "llama-3.1-70b-4xh100"
M3_NAME = "MiniMax-M3-MXFP8"
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
    )
    runner = web.AppRunner(app, shutdown_timeout=0.5)
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
    done: bool = False
    cut: bool = False

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
    async with session.post(f"{url}/v1/{path}", json={**body, "stream": True}) as response:
        result = Stream(response.status)
        try:
            async for raw in response.content:
                line = raw.decode("utf-8").strip()
                if line == "data: [DONE]":
                    result.done = True
                elif line.startswith("data: "):
                    result.events.append(json.loads(line.removeprefix("data: ")))
        except aiohttp.ClientPayloadError:
            result.cut = True
    return result


async def post(
    session: aiohttp.ClientSession, url: str, path: str, body: object
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    async with session.post(f"{url}{path}", data=data, headers=headers) as response:
        text = await response.text()
        return response.status, json.loads(text) if text else None


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
        assert "--enable-auto-tool-choice" in doc["message"]

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
        assert "not in the simulator's vocabulary" in bad["message"]
        assert both == 400

    run(body())


def test_metrics_expose_vllm_series_and_spec_decode_counters_grow() -> None:
    """/metrics parses as Prometheus text with vLLM's series; spec-decode counters grow."""

    async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, dict[str, float]]:
        async with session.get(f"{url}/metrics") as response:
            text = await response.text()
        out: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                assert sample.labels["model_name"] == M3_NAME
                key = sample.labels.get("position", sample.labels.get("le", ""))
                out.setdefault(sample.name, {})[key] = sample.value
        return out

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
            "object": "error",
            "message": f"This model's maximum context length is 32768 tokens. However, you "
            f"requested {p + 32768} tokens ({p} in the messages, 32768 in the completion). "
            "Please reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
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
    ],
)
def test_bad_requests_get_clear_json_errors(payload: object, status: int, needle: str) -> None:
    """Malformed bodies and missing fields are 400s (unknown model 404), never tracebacks."""

    async def body() -> None:
        logs: list[str] = []
        async with live(log=logs.append) as (url, session):
            got, doc = await post(session, url, "/v1/chat/completions", payload)
        assert got == status
        assert doc["object"] == "error"
        assert doc["code"] == status
        assert needle in doc["message"]
        assert "Traceback" not in doc["message"]
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
        assert "EngineCore encountered a fatal error" in doc["message"]
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


def test_cli_serves_crashes_at_concurrency_and_stops_on_sigterm() -> None:
    """The CLI announces its URL, crashes at the fault's concurrency, logs why, exits 0 on TERM."""

    async def body() -> None:
        process = await _cli(
            "--port", "0", "--time-scale", "0.1", "--fault", "crash-at-concurrency=2"
        )
        assert process.stderr is not None
        line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode().strip()
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
