"""validate's concurrency ladder against an in-process fake server (a `MockTransport`):
clean passes, 500s, cut streams, garbage, divergence and hangs, with no socket or subprocess."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from servekit.client.endpoint import Endpoint
from servekit.client.mock import MockRequest, MockResponse, MockTransport, settle
from servekit.client.transport import Disconnected
from servekit.validate.checks_load import check_ladder
from servekit.validate.context import Context, Outcome, ValidateSpec
from servekit.validate.runner import run_checks
from servekit.validate.transcript import Transcript

BASE = "http://fake:8000"


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One chat.completion.chunk event."""
    doc = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def answer_for(prompt: str) -> str:
    """The fake model's greedy answer to a ladder prompt."""
    topic = prompt.removeprefix("Write one sentence about ").rstrip(".")
    return f"Here is one plain sentence about {topic} for you."


@dataclass
class FakeChat:
    """A scripted chat server. Below `from_level` requests at once every stream is clean;
    at or above it, `fault` happens: `500`, `cut` (connection closed mid-stream), `early`
    (no [DONE]), `garbage` (NUL bytes), `diverge` (other words) or `hang` (stalls)."""

    fault: str = ""
    from_level: int = 10**9
    down_after_fault: bool = False
    inflight: int = 0
    levels: list[int] = field(default_factory=list)
    faulted: bool = False

    async def __call__(self, request: MockRequest) -> MockResponse:
        """Answer one request."""
        if request.path == "/health":
            return MockResponse(503 if self.faulted and self.down_after_fault else 200)
        if request.path == "/v1/models":
            return MockResponse.json({"data": [{"id": "m", "max_model_len": 4096}]})
        if request.path != "/v1/chat/completions":
            return MockResponse(404)
        self.inflight += 1
        await settle()  # every request of a burst arrives before any answers
        level = self.inflight
        self.levels.append(level)
        prompt = request.json()["messages"][0]["content"]
        faulty = level >= self.from_level
        self.faulted = self.faulted or faulty
        if faulty and self.fault == "500":
            await settle()  # still in flight while the rest of the burst decides
            self.inflight -= 1
            return MockResponse.json({"error": {"message": "CUDA error"}}, status=500)
        return MockResponse.stream(self._pieces(prompt, self.fault if faulty else ""))

    async def _pieces(self, prompt: str, fault: str) -> AsyncIterator[bytes]:
        try:
            text = {"garbage": "\x00\x00\x00", "diverge": "Something else entirely."}.get(
                fault, answer_for(prompt)
            )
            yield chunk({"role": "assistant", "content": ""})
            for i, word in enumerate(text.split(" ")):
                if fault == "hang" and i == 2:
                    await asyncio.Event().wait()
                yield chunk({"content": word if i == 0 else f" {word}"})
                if fault == "cut" and i == 1:
                    raise Disconnected("ClientPayloadError", "Response payload is not completed")
            yield chunk({}, finish="stop")
            if fault != "early":
                yield b"data: [DONE]\n\n"
        finally:
            self.inflight -= 1


def ladder(fake: FakeChat, timeout_s: float = 5.0) -> tuple[Outcome, float]:
    """Run the ladder (1, 2, 4) against the fake; its outcome and how long it took."""
    spec = ValidateSpec(BASE, ladder=(1, 2, 4), check_timeout_s=timeout_s)

    async def go() -> Outcome:
        ctx = Context(spec, Endpoint(BASE, MockTransport(fake)), Transcript(None))
        ctx.model = "m"
        return await check_ladder(ctx)

    start = time.monotonic()
    outcome = asyncio.run(go())
    return outcome, time.monotonic() - start


def test_clean_ladder_passes_with_every_level() -> None:
    """A clean server passes; each level is sent as one burst of that many requests."""
    fake = FakeChat()
    outcome, _ = ladder(fake)
    assert outcome.status == "pass", outcome.detail
    rows = [(r["concurrency"], r["prompts"], r["errors"], r["health"])
            for r in outcome.data["levels"]]  # fmt: skip
    assert rows == [(1, "identical", 0, 200), (2, "identical", 0, 200), (2, "distinct", 0, 200),
                    (4, "identical", 0, 200), (4, "distinct", 0, 200)]  # fmt: skip
    # 4 references one at a time, then bursts of 1, 2, 2, 4, 4
    assert max(fake.levels[:4]) == 1
    assert max(fake.levels) == 4


def test_500s_at_a_level_fail_it() -> None:
    """500s at concurrency 4 with /health still 200 fail the ladder at that level."""
    outcome, _ = ladder(FakeChat("500", from_level=4))
    assert outcome.status == "fail"
    assert outcome.detail.startswith("4 of 4 requests failed at concurrency 4 (http_500 x4)")
    assert "/health still 200" in outcome.detail


def test_cut_streams_and_a_dead_engine() -> None:
    """Streams cut at concurrency 2 while /health turns 503: the engine died there."""
    outcome, _ = ladder(FakeChat("cut", from_level=2, down_after_fault=True))
    assert outcome.status == "fail"
    assert outcome.detail.startswith(
        "engine died at concurrency 2: stream reset mid-response x2; /health now 503"
    )
    assert outcome.data["levels"][-1] == {"concurrency": 2, "prompts": "identical",
                                          "errors": 2, "garbage": 0, "health": 503}  # fmt: skip


def test_stream_without_done_is_a_cut() -> None:
    """A stream that ends before [DONE] counts as a reset stream, not an answer."""
    outcome, _ = ladder(FakeChat("early", from_level=4))
    assert outcome.status == "fail"
    assert "(stream reset mid-response x4)" in outcome.detail


def test_garbage_under_concurrency_fails() -> None:
    """NUL-byte output at concurrency 2 with HTTP 200 everywhere is garbage."""
    outcome, _ = ladder(FakeChat("garbage", from_level=2))
    assert outcome.status == "fail"
    assert outcome.detail.startswith("garbage at concurrency 2 although every response was HTTP")


def test_divergence_is_a_warning() -> None:
    """Greedy outputs that differ from the single-request references only warn."""
    outcome, _ = ladder(FakeChat("diverge", from_level=4))
    assert outcome.status == "warn"
    assert len(outcome.data["divergences"]) == 8  # two bursts of 4 at concurrency 4


def test_hang_times_out_and_is_classified() -> None:
    """Streams that stall at concurrency 2 end at the request deadline as timeouts; the
    ladder fails promptly instead of hanging."""
    outcome, took = ladder(FakeChat("hang", from_level=2), timeout_s=0.3)
    assert outcome.status == "fail"
    assert outcome.detail.startswith("2 of 2 requests failed at concurrency 2 (no answer in time")
    assert took < 3.0


def test_run_checks_over_an_injected_transport() -> None:
    """run_checks takes the transport: health, models and the ladder run on the fake."""
    spec = ValidateSpec(BASE, ladder=(1, 2), only=frozenset({"health", "models", "ladder"}))
    fake = FakeChat()
    transport = MockTransport(fake)
    results = asyncio.run(run_checks(spec, transport=transport))
    status = {r.name: r.status for r in results}
    assert status["health"] == status["ladder"] == "pass"
    assert status["chat"] == "skip"
    assert transport.requests[0].path == "/metrics"  # the counters before any check
