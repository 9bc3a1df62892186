"""The live simulator's `--enable-prompt-tokens-details`: usage reports prefix-cache hits.

vLLM 0.32 with the flag writes `usage.prompt_tokens_details` on the final usage (the last
streamed chunk with include_usage, or the whole body), not on continuous-usage chunks:
`cached_tokens` (and, for chat, `created_cache_tokens` and a null `multimodal_tokens`);
without the flag there is no `prompt_tokens_details` at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from servekit.profiles import load_profile
from servekit.sim.build import build_engine
from servekit.sim.server import make_app, make_runner

pytestmark = pytest.mark.integration

LLAMA = "llama-3.1-70b-4xh100"
NAME = "Llama-3.1-70B-Instruct"
HISTORY = " ".join(f"word{i} serves tokens" for i in range(150))  # a few hundred tokens
STREAM = {"include_usage": True, "continuous_usage_stats": True}


@contextlib.asynccontextmanager
async def live(details: bool, *overrides: str) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    app = make_app(
        load_profile(LLAMA, overrides=overrides),
        time_scale=0.02,
        log=lambda _line: None,
        shutdown_grace_s=0.2,
        enable_prompt_tokens_details=details,
    )
    runner = make_runner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        async with aiohttp.ClientSession() as session:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}", session
    finally:
        await runner.cleanup()


async def stream_usages(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], path: str
) -> list[dict[str, Any]]:
    """The usage of every streamed chunk that has one, in order (the final one last)."""
    usages = []
    body = {**body, "stream": True, "stream_options": STREAM}
    async with session.post(f"{url}/v1/{path}", json=body) as response:
        assert response.status == 200
        async for raw in response.content:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                event = json.loads(line.removeprefix("data: "))
                if event.get("usage"):
                    usages.append(event["usage"])
    return usages


async def hits(session: aiohttp.ClientSession, url: str) -> float:
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:prefix_cache_hits_total":
                return float(sample.value)
    raise AssertionError("no vllm:prefix_cache_hits_total")


def chat(content: str) -> dict[str, Any]:
    return {"model": NAME, "messages": [{"role": "user", "content": content}], "max_tokens": 8}


def block_size() -> int:
    return build_engine(load_profile(LLAMA)).model.block_size


def test_usage_reports_the_engines_hit_tokens_with_the_flag() -> None:
    """A repeated prompt hits its full blocks (the last token recomputed): cached_tokens is
    exactly that, and equals the /metrics hit delta; created_cache_tokens is the prompt's
    full blocks past the hit; continuous-usage chunks carry no details."""
    block = block_size()

    async def body() -> None:
        async with live(True) as (url, session):
            first = await stream_usages(session, url, chat(HISTORY), "chat/completions")
            prompt = first[-1]["prompt_tokens"]
            assert prompt > 2 * block
            assert first[-1]["prompt_tokens_details"] == {
                "cached_tokens": 0,
                "created_cache_tokens": prompt // block * block,
                "multimodal_tokens": None,
            }
            assert all("prompt_tokens_details" not in u for u in first[:-1])
            before = await hits(session, url)
            again = await stream_usages(session, url, chat(HISTORY), "chat/completions")
            expected = (prompt - 1) // block * block
            details = again[-1]["prompt_tokens_details"]
            assert details["cached_tokens"] == expected
            assert details["created_cache_tokens"] == prompt // block * block - expected
            assert await hits(session, url) - before == expected
            # whole bodies and the completions API say it too (completions: cached only)
            async with session.post(f"{url}/v1/chat/completions", json=chat(HISTORY)) as r:
                whole = await r.json()
            assert whole["usage"]["prompt_tokens_details"]["cached_tokens"] == expected
            completion = {"model": NAME, "prompt": HISTORY, "max_tokens": 4}
            usages = await stream_usages(session, url, completion, "completions")
            assert usages[-1]["prompt_tokens_details"] == {"cached_tokens": 0}
            usages = await stream_usages(session, url, completion, "completions")
            tokens = usages[-1]["prompt_tokens"]
            assert usages[-1]["prompt_tokens_details"] == {
                "cached_tokens": (tokens - 1) // block * block
            }

    asyncio.run(asyncio.wait_for(body(), 60))


def test_no_prompt_tokens_details_without_the_flag() -> None:
    async def body() -> None:
        async with live(False) as (url, session):
            for _ in range(2):
                usages = await stream_usages(session, url, chat(HISTORY), "chat/completions")
                assert usages
                assert all("prompt_tokens_details" not in u for u in usages)
            async with session.post(f"{url}/v1/chat/completions", json=chat(HISTORY)) as r:
                assert "prompt_tokens_details" not in (await r.json())["usage"]

    asyncio.run(asyncio.wait_for(body(), 60))


def test_prefix_caching_off_reports_no_hits() -> None:
    """With the flag and prefix caching off, a repeated prompt reports 0 cached tokens."""

    async def body() -> None:
        async with live(True, "serve_args.enable_prefix_caching=false") as (url, session):
            for _ in range(2):
                usages = await stream_usages(session, url, chat(HISTORY), "chat/completions")
                details = usages[-1]["prompt_tokens_details"]
                assert details["cached_tokens"] == 0
                assert details["created_cache_tokens"] == 0

    asyncio.run(asyncio.wait_for(body(), 60))


def test_sim_serve_takes_the_flag() -> None:
    """`servekit sim serve --enable-prompt-tokens-details` reports hits on a repeated prompt."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "servekit", "sim", "serve", "--profile", LLAMA, "--port", "0",
         "--time-scale", "0.02", "--json", "--enable-prompt-tokens-details"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        cached = []
        for _ in range(2):
            request = urllib.request.Request(  # noqa: S310 - the server's own http URL
                f"{url}/v1/chat/completions",
                data=json.dumps(chat(HISTORY)).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                usage = json.loads(response.read())["usage"]
            cached.append(usage["prompt_tokens_details"]["cached_tokens"])
        block = block_size()
        assert cached == [0, (usage["prompt_tokens"] - 1) // block * block]
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
