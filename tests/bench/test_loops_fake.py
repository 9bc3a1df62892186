"""bench's closed and open loops against an in-process fake server (a `MockTransport`):
exact tokens and orderings, cut streams, 500s and hangs, with no socket or subprocess."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit.bench.loops import ClientLoad, Share, closed_taker, send_share
from servekit.bench.requests import api_path, request_body
from servekit.bench.runner import run_points
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.store import RecordWriter, read_records
from servekit.client.endpoint import Endpoint
from servekit.client.mock import MockRequest, MockResponse, MockTransport
from servekit.client.transport import Disconnected
from servekit.records import RequestRecord

BASE = "http://fake:8000"
OUTPUT_LEN = 5


def chunk(tokens: int) -> bytes:
    """A completions chunk of one word with vLLM's cumulative per-chunk usage."""
    doc = {"choices": [{"index": 0, "text": " w", "finish_reason": None}],
           "usage": {"prompt_tokens": 7, "completion_tokens": tokens}}  # fmt: skip
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


@dataclass
class FakeVllm:
    """A scripted vLLM: a prompt starting `#cut`, `#early`, `#500`, `#stuck`
    or `#hang`
    names its fate; any other is answered normally.

    A normal stream sends OUTPUT_LEN tokens as chunks of 1, 2 and 2 tokens and counts them
    into `vllm:generation_tokens`; `order` lists prompts as requests arrive; `inflight_max`
    is the most streams open at once; `healthy` is what /health says.
    """

    delay_s: float = 0.01
    healthy: bool = True
    order: list[str] = field(default_factory=list)
    inflight: int = 0
    inflight_max: int = 0
    generated: int = 0

    async def __call__(self, request: MockRequest) -> MockResponse:
        """Answer one request."""
        if request.path == "/health":
            return MockResponse(200 if self.healthy else 503, "text/plain")
        if request.path == "/metrics":
            text = (
                "# TYPE vllm:generation_tokens_total counter\n"
                f"vllm:generation_tokens_total {self.generated}.0\n"
            )
            return MockResponse(200, "text/plain", text.encode())
        if request.path == "/tokenize":
            return MockResponse.json({"count": len(request.json()["prompt"].split())})
        prompt = request.json()["prompt"]
        self.order.append(prompt)
        if prompt.startswith("#500"):
            return MockResponse.json({"error": {"message": "engine failed"}}, status=500)
        if prompt.startswith("#stuck"):
            await asyncio.Event().wait()  # accepted, never answered
        return MockResponse.stream(self._pieces(prompt))

    async def _pieces(self, prompt: str) -> AsyncIterator[bytes]:
        self.inflight += 1
        self.inflight_max = max(self.inflight_max, self.inflight)
        try:
            for tokens in (1, 3, OUTPUT_LEN):
                await asyncio.sleep(self.delay_s)
                if prompt.startswith("#hang") and tokens == 3:
                    await asyncio.Event().wait()  # the server stalls mid-stream
                self.generated += 1 if tokens == 1 else 2
                yield chunk(tokens)
                if prompt.startswith("#cut"):
                    raise Disconnected("ClientPayloadError", "Response payload is not completed")
            if not prompt.startswith("#early"):
                yield b"data: [DONE]\n\n"
        finally:
            self.inflight -= 1


def spec(**kw: Any) -> BenchSpec:
    """A completions bench of OUTPUT_LEN tokens with a short per-request deadline."""
    return BenchSpec(BASE, "m", "completions", 8, OUTPUT_LEN, timeout_s=0.5, **kw)


def send(
    fake: FakeVllm, prompts: list[str], share: Share
) -> tuple[list[tuple[int, RequestRecord]], ClientLoad]:
    """Send `prompts` as one share over the fake server; the records in end order."""
    bench = spec()
    bodies = [request_body(bench, p, OUTPUT_LEN) for p in prompts]
    ended: list[tuple[int, RequestRecord]] = []
    server = Endpoint(BASE, MockTransport(fake))
    taker = closed_taker(len(bodies), share.deadline_ns)

    async def go() -> ClientLoad:
        return await send_share(
            server, api_path(bench), bench, "p", bodies, share, taker,
            lambda i, r: ended.append((i, r)),
        )  # fmt: skip

    return ended, asyncio.run(go())


def test_closed_loop_exact_tokens_and_order() -> None:
    """Closed loop c=3 over 9 requests: each sent once, taken in index order, never more
    than 3 in flight, every record with 5 tokens as chunks of 1, 2, 2."""
    fake = FakeVllm()
    prompts = [f"ok {i}" for i in range(9)]
    ended, load = send(fake, prompts, Share(open_loop=False, concurrency=3))
    assert fake.order == prompts
    assert fake.inflight_max == 3
    assert sorted(i for i, _ in ended) == list(range(9))
    for index, record in ended:
        assert record.id == f"p-{index}"
        assert record.ok
        assert record.output_tokens == OUTPUT_LEN
        assert record.chunk_tokens == (1, 2, 2)
        assert record.prompt_tokens == 7
        assert record.sent_ns <= record.first_token_ns == record.chunk_ns[0] <= record.end_ns
        assert list(record.chunk_ns) == sorted(record.chunk_ns)
    assert load.send_lags_ms == []  # closed loop has no schedule to lag behind


def test_closed_loop_one_worker_is_sequential() -> None:
    """Closed loop c=1: each request starts after the previous one ended."""
    ended, _ = send(FakeVllm(), [f"ok {i}" for i in range(4)], Share(False, concurrency=1))
    records = [r for _, r in ended]
    assert [r.id for r in records] == [f"p-{i}" for i in range(4)]
    assert all(b.sent_ns >= a.end_ns for a, b in itertools.pairwise(records))


def test_closed_loop_deadline_stops_taking() -> None:
    """With a deadline already past, the closed taker hands out nothing and nothing is sent."""
    fake = FakeVllm()
    ended, _ = send(fake, ["ok"] * 4, Share(False, concurrency=2, deadline_ns=time.monotonic_ns()))
    assert ended == []
    assert fake.order == []


def test_open_loop_follows_the_schedule() -> None:
    """Open loop: requests go out in schedule order, none before its time, with the send
    lag recorded per arrival; all of them overlap when uncapped."""
    fake = FakeVllm(delay_s=0.05)
    start = time.monotonic_ns() + 20_000_000
    schedule = ((0, 0.0), (1, 0.01), (2, 0.02), (3, 0.03))
    share = Share(open_loop=True, schedule=schedule, start_ns=start)
    ended, load = send(fake, [f"ok {i}" for i in range(4)], share)
    assert fake.order == [f"ok {i}" for i in range(4)]
    assert fake.inflight_max == 4
    assert len(load.send_lags_ms) == 4
    assert all(lag >= 0 for lag in load.send_lags_ms)
    by_index = dict(ended)
    for index, offset_s in schedule:
        record = by_index[index]
        assert record.scheduled_ns == start + int(offset_s * 1e9)
        assert record.sent_ns >= record.scheduled_ns
        assert record.output_tokens == OUTPUT_LEN


def test_open_loop_cap_and_deadline() -> None:
    """Open loop with cap 1 keeps one request in flight; arrivals at or after the deadline
    are not sent."""
    fake = FakeVllm()
    start = time.monotonic_ns()
    schedule = ((0, 0.0), (1, 0.0), (2, 0.0), (3, 10.0))
    share = Share(True, schedule=schedule, cap=1, start_ns=start, deadline_ns=start + 5 * 10**9)
    ended, _ = send(fake, [f"ok {i}" for i in range(4)], share)
    assert fake.inflight_max == 1
    assert sorted(i for i, _ in ended) == [0, 1, 2]
    assert fake.order == ["ok 0", "ok 1", "ok 2"]


def test_failures_are_classified_in_both_loops() -> None:
    """A 500, a cut connection, a stream without [DONE], and hangs before the answer or
    mid-stream each become a classified record with no output tokens; hangs end at the
    request's deadline."""
    prompts = ["ok", "#500", "#cut", "#early", "#hang", "#stuck"]
    want = {0: None, 1: "http_500", 2: "stream_cut", 3: "stream_cut", 4: "timeout", 5: "timeout"}
    start = time.monotonic()
    closed, _ = send(FakeVllm(), prompts, Share(False, concurrency=6))
    opened, _ = send(FakeVllm(), prompts, Share(True, schedule=tuple((i, 0.0) for i in range(6)),
                                                start_ns=time.monotonic_ns()))  # fmt: skip
    assert time.monotonic() - start < 5.0
    for ended in (closed, opened):
        kinds = {i: r.error_kind for i, r in ended}
        assert kinds == want
        for index, record in ended:
            assert record.output_tokens == (OUTPUT_LEN if index == 0 else 0)
    for index in (4, 5):
        hang = dict(closed)[index]
        assert 0.45e9 <= hang.end_ns - hang.sent_ns < 2e9  # the 0.5 s deadline fired


def test_run_points_over_a_fake_server(tmp_path: Path) -> None:
    """run_points over an injected transport: sized prompts, records written, the server
    block from /metrics deltas agreeing with the client's token count."""
    fake = FakeVllm()
    bench = BenchSpec(BASE, "m", "completions", 8, OUTPUT_LEN, requests_per_point=6,
                      metrics_interval_s=0)  # fmt: skip
    points = [PointSpec("c=2", concurrency=2), PointSpec("r=50", rate_rps=50.0, arrival="constant")]

    async def go() -> Any:
        with RecordWriter(tmp_path) as writer:
            return await run_points(bench, points, writer, transport=MockTransport(fake))

    run = asyncio.run(go())
    assert run.stopped is None
    assert [o.spec.label for o in run.outcomes] == ["c=2", "r=50"]
    for outcome in run.outcomes:
        assert len(outcome.records) == 6
        assert outcome.server.generation_tokens == 6 * OUTPUT_LEN
        assert not any("tokens during the point" in w for w in outcome.warnings)
    assert fake.inflight_max <= 6
    records = read_records(tmp_path)
    assert len(records) == 12
    assert all(r.ok and r.output_tokens == OUTPUT_LEN for r in records)


def test_run_points_stops_when_health_fails(tmp_path: Path) -> None:
    """Failed requests plus a /health that is not 200 stop the sweep after that point (the
    server is healthy until the first completion fails: one dead at the start gets no
    request at all, see tests/hostile)."""
    fake = FakeVllm()
    bench = BenchSpec(BASE, "m", "completions", 8, OUTPUT_LEN, requests_per_point=2,
                      metrics_interval_s=0, dataset=None)  # fmt: skip

    async def go() -> Any:
        with RecordWriter(tmp_path) as writer:
            points = [PointSpec("c=1", concurrency=1), PointSpec("c=2", concurrency=2)]
            transport = MockTransport(_failing(fake))
            return await run_points(bench, points, writer, transport=transport)

    run = asyncio.run(go())
    assert [o.spec.label for o in run.outcomes] == ["c=1"]
    assert run.stopped is not None
    assert "stopped answering /health during c=1" in str(run.stopped)
    assert {r.error_kind for r in run.outcomes[0].records} == {"http_500"}


def _failing(fake: FakeVllm) -> Any:
    """The fake server, but every completion answers 500 (and /health 503 after it)."""

    async def handler(request: MockRequest) -> MockResponse:
        if request.path == "/v1/completions":
            fake.healthy = False
            return MockResponse.json({"error": {"message": "down"}}, status=500)
        return await fake(request)

    return handler
