"""Helpers for the session and agent-loop tests: a live simulator, a transport that keeps
every chat request and the bytes of its answer, and one call that runs a sweep."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit.bench.runner import BenchRun, run_points
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.store import RecordWriter
from servekit.client.aiohttp_transport import open_transport
from servekit.client.transport import Response, Transport
from servekit.records import RequestRecord

SIM_PROFILE = "llama-3.1-70b-4xh100"  # auto tool choice with the llama3_json parser


@dataclass(frozen=True)
class Sim:
    """A running simulator: its URL and served model."""

    url: str
    model: str

    def tokens(self, body: dict[str, Any]) -> int:
        """The simulator's /tokenize count of a body (messages, tools or a prompt)."""
        request = urllib.request.Request(  # noqa: S310 - the loopback simulator
            f"{self.url}/tokenize", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - loopback
            return int(json.load(reply)["count"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(url: str) -> None:
    for _ in range(400):  # about 20 s
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=0.5):  # noqa: S310
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing answered {url}/health")


@contextlib.contextmanager
def sim_server(*extra: str) -> Iterator[Sim]:
    """`servekit sim serve` (20x real time) on a free loopback port."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "servekit", "sim", "serve", "--profile", SIM_PROFILE,
         "--port", str(port), "--time-scale", "0.05", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(url)
        with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as reply:  # noqa: S310
            model = json.load(reply)["data"][0]["id"]
        yield Sim(url, model)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@dataclass
class Exchange:
    """One chat request as sent and the SSE bytes that came back."""

    body: dict[str, Any]
    answer: bytearray = field(default_factory=bytearray)

    def content(self) -> str:
        """The answer's streamed content, joined."""
        return "".join(
            (c["choices"][0]["delta"].get("content") or "") for c in self._chunks() if c["choices"]
        )

    def tool_calls(self) -> list[dict[str, Any]]:
        """The answer's streamed tool-call deltas, in order."""
        return [
            call
            for c in self._chunks()
            if c["choices"]
            for call in c["choices"][0]["delta"].get("tool_calls") or ()
        ]

    def _chunks(self) -> list[dict[str, Any]]:
        events = bytes(self.answer).decode().split("\n\n")
        datas = [e.removeprefix("data: ") for e in events if e.startswith("data: ")]
        return [json.loads(d) for d in datas if d != "[DONE]"]


class _Kept:
    def __init__(self, inner: Response, exchange: Exchange) -> None:
        self._inner = inner
        self._exchange = exchange

    @property
    def status(self) -> int:
        return self._inner.status

    @property
    def content_type(self) -> str:
        return self._inner.content_type

    @property
    def sent_ns(self) -> int | None:
        return self._inner.sent_ns

    async def read(self) -> bytes:
        data = await self._inner.read()
        self._exchange.answer += data
        return data

    async def pieces(self) -> AsyncIterator[bytes]:
        async for piece in self._inner.pieces():
            self._exchange.answer += piece
            yield piece


class KeepingTransport:
    """A real transport that also keeps every chat completion request and its answer."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.exchanges: list[Exchange] = []

    @contextlib.asynccontextmanager
    async def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> AsyncIterator[Response]:
        async with self.inner.send(method, url, body=body, headers=headers) as resp:
            if not url.endswith("/v1/chat/completions") or body is None:
                yield resp
                return
            exchange = Exchange(json.loads(body))
            self.exchanges.append(exchange)
            yield _Kept(resp, exchange)


@dataclass
class Sweep:
    """What a sweep returned, what it wrote and what it sent."""

    run: BenchRun
    written: list[RequestRecord]
    seen: list[RequestRecord]
    exchanges: list[Exchange]

    def sessions(self) -> dict[str, list[RequestRecord]]:
        """Every point's records by session, in turn order."""
        out: dict[str, list[RequestRecord]] = {}
        for outcome in self.run.outcomes:
            for record in outcome.records:
                assert record.session is not None
                out.setdefault(record.session, []).append(record)
        return {k: sorted(v, key=lambda r: r.turn or 0) for k, v in out.items()}

    def exchanges_of(self, first_user: str) -> list[Exchange]:
        """The requests of the session whose first user message is `first_user`."""
        return [
            e
            for e in self.exchanges
            if next(m for m in e.body["messages"] if m["role"] == "user")["content"] == first_user
        ]


def sweep(spec: BenchSpec, points: list[PointSpec], out: Path) -> Sweep:
    """Run the points over a keeping transport; the records as written and as seen, and
    the requests the sessions sent (without the token-ids probe before them)."""
    from servekit.bench.store import read_records

    seen: list[RequestRecord] = []

    async def go() -> tuple[BenchRun, list[Exchange]]:
        async with open_transport() as real:
            keeping = KeepingTransport(real)
            with RecordWriter(out) as writer:
                run = await run_points(
                    spec, points, writer, on_record=seen.append, transport=keeping
                )
            return run, keeping.exchanges

    run, exchanges = asyncio.run(go())
    if spec.token_ids is None:  # the first request was the token-ids probe, not a turn
        assert exchanges[0].body.get("return_token_ids") is True
        exchanges = exchanges[1:]
    return Sweep(run, read_records(out), seen, exchanges)
