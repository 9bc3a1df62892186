"""bench counts every token the server streams, also those that decode to no text (issue #28).

The live simulator's `--empty-token-share` and `--split-char-share` make a share of tokens
stream as empty text (special tokens, the first half of a two-token character), as a real
byte-level vocabulary does. Every request's tokens must then be timed one by one: with
token ids (asked for after bench's probe) and with per-chunk usage alike, N tokens give N
timestamps and N - 1 ITL samples, not N - k for k empty chunks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner

from servekit.analyze.summarize import point_metrics
from servekit.bench.runner import run_points
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.store import RecordWriter, read_records
from servekit.cli.main import cli

pytestmark = pytest.mark.integration
PLAIN = "minimax-m3-mxfp8-8xa800-no-eagle3"  # one token per engine step; M3's parsers on
SHAPES = ("--empty-token-share", "0.15", "--split-char-share", "0.15")
OUTPUT = 40


def _bench(url: str, out: Path, *extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [
        "bench", "--url", url, "--concurrency", "4", "--requests-per-point", "12",
        "--warmup", "0", "--input-len", "32", "--output-len", str(OUTPUT),
        "--out", str(out), "--json", *extra,
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.mark.parametrize(
    ("api", "flags", "source"),
    [
        ("chat", (), "token_ids"),  # the probe finds token ids; chunks a parser holds are sent
        ("completions", (), "token_ids"),
        ("completions", ("--token-ids", "off"), "chunk_usage"),  # empty-text chunks, usage each
    ],
)
def test_every_token_is_a_timestamp(
    start_server: Callable[..., tuple[object, str]],
    tmp_path: Path,
    api: str,
    flags: tuple[str, ...],
    source: str,
) -> None:
    """N tokens, N timestamps and N - 1 ITL samples per request, although some chunks
    carried no text; the counts equal the server's usage and its generation counter."""
    _, url = start_server("--profile", PLAIN, *SHAPES)
    summary = _bench(url, tmp_path, "--api", api, *flags)
    records = read_records(tmp_path)
    assert len(records) == 12
    assert all(r.ok and r.output_tokens == OUTPUT for r in records)
    assert all(r.chunk_tokens == (1,) * OUTPUT for r in records)  # one timestamp per token
    assert any(r.text_chunks < OUTPUT for r in records)  # empty-text chunks were there
    assert {r.token_source for r in records} == {source}
    (point,) = summary["points"]
    assert point["itl_ms"]["count"] == 12 * (OUTPUT - 1)
    assert point["token_sources"] == {source: 12}
    assert point["server"]["generation_tokens"] == 12 * OUTPUT
    assert summary["workload"]["return_token_ids"] is (source == "token_ids")


def test_held_back_chunks_without_token_ids_are_counted_in_the_next(
    start_server: Callable[..., tuple[object, str]], tmp_path: Path
) -> None:
    """Chat without token ids: M3's parsers send no chunk for a step whose tokens decode to
    nothing (as vLLM's do), so fewer chunks arrive than tokens; the next chunk's usage
    carries the held tokens, and the total is still exact."""
    _, url = start_server("--profile", PLAIN, *SHAPES)
    _bench(url, tmp_path, "--api", "chat", "--token-ids", "off")
    records = read_records(tmp_path)
    assert all(r.ok and sum(r.chunk_tokens) == r.output_tokens == OUTPUT for r in records)
    assert any(len(r.chunk_ns) < OUTPUT for r in records)
    assert max(max(r.chunk_tokens) for r in records) > 1
    assert {r.token_source for r in records} == {"chunk_usage"}
    m = point_metrics(records, ci=False)
    assert m.itl_ms.count == sum(r.output_tokens - r.chunk_tokens[0] for r in records)


def _strict_app(seen: list[dict[str, Any]]) -> web.Application:
    """A server that refuses any unknown field (as a strict OpenAI-compatible one does)."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        if "return_token_ids" in body:
            message = "Unrecognized request argument supplied: return_token_ids"
            return web.json_response({"error": {"message": message}}, status=400)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for done in range(1, body["max_tokens"] + 1):
            chunk = {"choices": [{"index": 0, "delta": {"content": "" if done % 3 else "w"}}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": done}}  # fmt: skip
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    return app


@pytest.mark.parametrize("token_ids", [None, False])
def test_a_server_that_refuses_token_ids_is_probed_once_and_left_alone(
    tmp_path: Path, token_ids: bool | None
) -> None:
    """The probe's 400 leaves token ids off without a word: one refused request, then
    every request without the field, counted from usage. `--token-ids off` sends no probe."""
    seen: list[dict[str, Any]] = []

    async def go() -> list[Any]:
        runner = web.AppRunner(_strict_app(seen))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        spec = BenchSpec(url, "strict", input_len=8, output_len=6, requests_per_point=5,
                         tokenizer=None, token_ids=token_ids, metrics_interval_s=0)  # fmt: skip
        try:
            with RecordWriter(tmp_path) as writer:
                run = await run_points(spec, [PointSpec("c=2", concurrency=2)], writer)
        finally:
            await runner.cleanup()
        return run.outcomes

    (outcome,) = asyncio.run(go())
    probes = [b for b in seen if "return_token_ids" in b]
    assert len(probes) == (1 if token_ids is None else 0)
    assert len(seen) == 5 + len(probes)
    assert all(r.ok and r.chunk_tokens == (1,) * 6 for r in outcome.records)
    assert {r.token_source for r in outcome.records} == {"chunk_usage"}
    assert all(r.text_chunks == 2 for r in outcome.records)
