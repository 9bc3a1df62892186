"""The client seam in process: `Endpoint` over a `MockTransport`, the sync probes, URL helpers."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from servekit.client import probe
from servekit.client.endpoint import Endpoint, open_endpoint
from servekit.client.mock import MockRequest, MockResponse, MockTransport, settle
from servekit.client.transport import ConnectFailed, Disconnected
from servekit.client.urls import file_url_path, is_http_url, redact_url, url_scheme

BASE = "http://fake:8000"


def chunk(text: str, tokens: int) -> bytes:
    """One completions chunk carrying `text` and the cumulative usage `tokens`."""
    doc = {"choices": [{"index": 0, "text": text, "finish_reason": None}],
           "usage": {"prompt_tokens": 4, "completion_tokens": tokens}}  # fmt: skip
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


async def never() -> MockResponse:
    """A server that accepted the request and never answers."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def handler(request: MockRequest) -> MockResponse:
    """A small vLLM: the fixed endpoints, and streams chosen by the request's prompt."""
    if request.path == "/health":
        return MockResponse(200, "text/plain")
    if request.path == "/metrics":
        return MockResponse(200, "text/plain", b"vllm:num_preemptions_total 3.0\n")
    if request.path == "/version":
        return MockResponse.json({"version": "0.26.0"})
    if request.path == "/v1/models":
        return MockResponse.json({"data": [{"id": "m", "max_model_len": 4096}]})
    if request.path == "/tokenize":
        return MockResponse.json({"count": len(request.json()["prompt"].split())})
    prompt = request.json()["prompt"]
    if prompt == "500":
        return MockResponse.json({"error": {"message": "boom"}}, status=500)
    if prompt == "hang":
        return await never()
    return MockResponse.stream(stream_pieces(prompt))


async def stream_pieces(prompt: str) -> AsyncIterator[bytes]:
    """Three chunks of 1, 2 and 3 tokens; then [DONE], a cut, a stall or an early end."""
    for tokens in (1, 3, 6):
        yield chunk("x", tokens)
    if prompt == "cut":
        raise Disconnected("ClientPayloadError", "Response payload is not completed")
    if prompt == "stall":
        await asyncio.Event().wait()
    if prompt != "no_done":
        yield b"data: [DONE]\n\n"


def endpoint(headers: dict[str, str] | None = None) -> tuple[Endpoint, MockTransport]:
    """An endpoint over the fake server, and its transport (to read what was sent)."""
    transport = MockTransport(handler)
    return Endpoint(BASE, transport, headers or {}), transport


def test_fixed_endpoints_answer() -> None:
    """health, metrics, version, models and tokenize read the fake server's answers."""

    async def go() -> tuple[Any, ...]:
        server, _ = endpoint()
        models = await server.models()
        return (await server.health(), await server.metrics(), await server.version(),
                models.doc, await server.tokenize({"prompt": "a b c"}, timeout_s=1))  # fmt: skip

    health, metrics, version, models, count = asyncio.run(go())
    assert (health, version, count) == (200, "0.26.0", 3)
    assert metrics == b"vllm:num_preemptions_total 3.0\n"
    assert models == {"data": [{"id": "m", "max_model_len": 4096}]}


def test_headers_and_urls_go_with_every_request() -> None:
    """Every request goes to base_url + path with the endpoint's headers, in call order."""

    async def go() -> list[MockRequest]:
        server, transport = endpoint({"Authorization": "Bearer k"})
        await server.health()
        await server.stream("/v1/completions", {"prompt": "ok"}, timeout_s=1)
        await server.at("http://other:1").models()
        return transport.requests

    sent = asyncio.run(go())
    assert [r.url for r in sent] == [f"{BASE}/health", f"{BASE}/v1/completions",
                                     "http://other:1/v1/models"]  # fmt: skip
    assert all(r.headers["Authorization"] == "Bearer k" for r in sent)
    assert sent[1].headers["Content-Type"] == "application/json"
    assert sent[1].json() == {"prompt": "ok"}


def test_complete_stream_counts_tokens_exactly() -> None:
    """A stream that ends with [DONE] keeps its chunks, in order, with per-chunk tokens."""

    async def go() -> Any:
        return await endpoint()[0].stream("/v1/completions", {"prompt": "ok"}, timeout_s=1)

    timed = asyncio.run(go())
    r = timed.result
    assert r.error_kind is None
    assert r.done
    assert r.chunk_tokens == [1, 2, 3]
    assert r.completion_tokens == 6
    assert r.chunk_ns == sorted(r.chunk_ns)
    assert timed.sent_ns <= r.chunk_ns[0] <= timed.end_ns
    assert timed.status == 200


@pytest.mark.parametrize(
    ("prompt", "kind"),
    [("cut", "stream_cut"), ("no_done", "stream_cut"), ("500", "http_500"),
     ("hang", "timeout"), ("stall", "timeout")],
)  # fmt: skip
def test_stream_failures_are_classified(prompt: str, kind: str) -> None:
    """Cut and early-ended streams, a 500, and hangs before or during the body are classified,
    and the client's own deadline ends a hang (the test takes well under a second)."""

    async def go() -> Any:
        return await endpoint()[0].stream("/v1/completions", {"prompt": prompt}, timeout_s=0.2)

    start = time.monotonic()
    timed = asyncio.run(go())
    assert timed.result.error_kind == kind
    assert time.monotonic() - start < 2.0
    if prompt == "500":
        assert timed.result.error == "boom"


def test_probes_say_none_when_nothing_answers() -> None:
    """health/metrics/version/tokenize return None on a refused or hung server; models
    comes back classified; the deadline is the endpoint's, not the transport's."""

    async def refused(request: MockRequest) -> MockResponse:
        raise ConnectFailed("ClientConnectorError", "Connection refused")

    async def hung(request: MockRequest) -> MockResponse:
        return await never()

    async def go(server: Endpoint) -> tuple[Any, ...]:
        return (await server.health(timeout_s=0.1), await server.metrics(timeout_s=0.1),
                await server.version(timeout_s=0.1), await server.tokenize({}, timeout_s=0.1),
                (await server.models(timeout_s=0.1)).error_kind)  # fmt: skip

    assert asyncio.run(go(Endpoint(BASE, MockTransport(refused)))) == (None,) * 4 + ("connect",)
    assert asyncio.run(go(Endpoint(BASE, MockTransport(hung)))) == (None,) * 4 + ("timeout",)


def test_warm_opens_one_call_per_connection() -> None:
    """warm(n) sends n concurrent /health calls and swallows their failures."""
    inflight: list[int] = [0, 0]

    async def slow(request: MockRequest) -> MockResponse:
        inflight[0] += 1
        await settle()  # the other calls of warm(5) arrive meanwhile
        inflight[1] = max(inflight)
        inflight[0] -= 1
        raise ConnectFailed("OSError", "refused")

    transport = MockTransport(slow)
    asyncio.run(Endpoint(BASE, transport).warm(5))
    assert [r.path for r in transport.requests] == ["/health"] * 5
    assert inflight[1] == 5


def test_open_endpoint_uses_a_given_transport() -> None:
    """open_endpoint with a transport wraps it (no HTTP session is opened)."""

    async def go() -> int | None:
        transport = MockTransport(handler)
        async with open_endpoint(BASE, {"X": "1"}, transport=transport) as server:
            assert server.transport is transport
            assert server.headers == {"X": "1"}
            return await server.health()

    assert asyncio.run(go()) == 200


def test_real_transport_classifies_a_refused_connection() -> None:
    """Over the real aiohttp transport, nothing listening is `connect` and health None."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused

        async def go() -> tuple[Any, ...]:
            async with open_endpoint(f"http://127.0.0.1:{port}") as server:
                timed = await server.stream("/v1/completions", {}, timeout_s=5)
                return timed.result.error_kind, await server.health()

        assert asyncio.run(go()) == ("connect", None)


def test_sync_probes() -> None:
    """The sync probes answer None, [] and False when nothing listens on the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        assert probe.health(url) is None
        assert probe.served_models(url) == []
        assert probe.port_in_use("127.0.0.1", port) is False
        s.listen()
        assert probe.port_in_use("127.0.0.1", port) is True


def test_url_helpers() -> None:
    """Scheme, file: path, http check and credential redaction."""
    assert url_scheme("HTTPS://x/y") == "https"
    assert url_scheme("fix.patch") == ""
    assert file_url_path("file:///tmp/a%20b.patch") == "/tmp/a b.patch"
    assert file_url_path("https://x/a.patch") is None
    assert is_http_url("http://x")
    assert not is_http_url("ftp://x")
    assert not is_http_url("http://[::1")
    assert redact_url("http://u:p@host:8000/v1") == "http://host:8000/v1"
    assert redact_url("http://host/v1") == "http://host/v1"
