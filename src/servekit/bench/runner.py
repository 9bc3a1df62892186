"""Run a load test against an OpenAI-compatible server (shell, asyncio).

Closed loop: `concurrency` workers each send the next request as soon as their previous one
ends. Open loop: requests are sent at their scheduled arrival times (Poisson, gamma or
constant), optionally capped by `max_concurrency`. Every request becomes a `RequestRecord`,
appended and flushed the moment it ends. `/metrics` is scraped before and after each point
and sampled during it for the gauges.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from servekit.analyze.summarize import distribution
from servekit.bench.scrape import Snapshot, scrape, server_block
from servekit.bench.sizing import sized_prompts
from servekit.bench.store import RecordWriter
from servekit.client.http import TimedStream, stream_request, timing_trace_config
from servekit.errors import EndpointError
from servekit.records import RequestRecord
from servekit.workload.datasets import LengthSpec, PromptItem
from servekit.workload.synthetic import constant_arrivals, gamma_arrivals, poisson_arrivals

SAMPLE_EVERY_S = 0.25


@dataclass(frozen=True, slots=True)
class BenchSpec:
    """What to send and where."""

    base_url: str
    model: str
    api: str = "chat"
    input_len: int = 1024
    output_len: int = 128
    temperature: float = 0.0
    requests_per_point: int = 64
    warmup: int = 0
    seed: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] | None = None
    timeout_s: float = 600.0
    input_dist: LengthSpec | None = None  # overrides input_len when set
    output_dist: LengthSpec | None = None  # overrides output_len when set
    dataset: tuple[PromptItem, ...] | None = None  # prompts from a file instead of synthetic
    shared_prefix: int = 0  # tokens every synthetic prompt starts with (prefix caching)
    tokenizer: str | None = None  # local tokenizer.json when the server has no /tokenize


@dataclass(frozen=True, slots=True)
class Planned:
    """One request to send: its body and the output length it must produce."""

    body: dict[str, Any]
    output_len: int


@dataclass(frozen=True, slots=True)
class PointSpec:
    """One load level."""

    label: str
    concurrency: int | None = None
    rate_rps: float | None = None
    arrival: str = "poisson"  # poisson | gamma:SHAPE | constant
    max_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class PointOutcome:
    """A finished point: its records and the server's view of it."""

    spec: PointSpec
    records: list[RequestRecord]
    server: dict[str, object]
    warnings: list[str]
    client: dict[str, object] = field(default_factory=dict)


def request_body(
    spec: BenchSpec, prompt: str | None, output_len: int, messages: Any = None
) -> dict[str, Any]:
    """The streaming request body: exact output length, usage on every chunk."""
    body: dict[str, Any] = {
        "model": spec.model,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "ignore_eos": True,
        "temperature": spec.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if spec.api == "chat":
        body["messages"] = (
            list(messages) if messages is not None else [{"role": "user", "content": prompt}]
        )
        if spec.chat_template_kwargs is not None:
            body["chat_template_kwargs"] = spec.chat_template_kwargs
    else:
        if prompt is None:  # chat messages sent to /v1/completions: join their text
            prompt = "\n".join(str(m.get("content", "")) for m in messages or ())
        body["prompt"] = prompt
    return body


async def plan_requests(
    session: aiohttp.ClientSession, spec: BenchSpec, count: int, rng: random.Random
) -> tuple[list[Planned], str]:
    """Every request of the run, in order (from the dataset, or synthetic and sized), and
    how the prompts' lengths were counted."""
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
    prompts, method = await sized_prompts(session, spec, lengths, rng)
    return [
        Planned(request_body(spec, p, out), out) for p, out in zip(prompts, outputs, strict=True)
    ], method


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
        prompt_tokens=r.prompt_tokens or 0,
        output_tokens=(r.completion_tokens or sum(r.chunk_tokens)) if ok else 0,
        reasoning_tokens=r.reasoning_tokens,
        finish_reason=r.finish_reason,
        error_kind=r.error_kind,
        error=r.error,
    )


async def _sample_gauges(
    session: aiohttp.ClientSession, base_url: str, maxima: dict[str, float], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        snap = await scrape(session, base_url)
        if snap is not None:
            for name, value in snap.gauges.items():
                maxima[name] = max(maxima.get(name, value), value)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)


async def _warm_connections(session: aiohttp.ClientSession, base_url: str, count: int) -> None:
    """Open `count` keep-alive connections (concurrent /health calls) before a point, so no
    measured request pays for a TCP handshake."""

    async def one() -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(f"{base_url}/health", timeout=aiohttp.ClientTimeout(10)) as r:
                await r.read()

    await asyncio.gather(*(one() for _ in range(count)))


async def _health(session: aiohttp.ClientSession, base_url: str) -> int | None:
    try:
        async with session.get(f"{base_url}/health", timeout=aiohttp.ClientTimeout(5)) as r:
            return r.status
    except (aiohttp.ClientError, TimeoutError):
        return None


@dataclass(frozen=True, slots=True)
class BenchRun:
    """The points that ran and, if the sweep stopped early, why."""

    outcomes: list[PointOutcome]
    stopped: EndpointError | None = None


@dataclass(slots=True)
class Progress:
    """What has finished so far, kept by the caller so an interrupted run can be summarized."""

    outcomes: list[PointOutcome] = field(default_factory=list)
    current: PointSpec | None = None
    current_records: list[RequestRecord] = field(default_factory=list)
    input_len_method: str = ""


async def run_points(
    spec: BenchSpec,
    points: list[PointSpec],
    writer: RecordWriter,
    *,
    progress: Progress | None = None,
    on_record: Callable[[RequestRecord], None] = lambda _: None,
    on_point: Callable[[PointSpec, int], None] = lambda _p, _n: None,
) -> BenchRun:
    """Run every point in order; stop early (with the reason) if the server dies."""
    progress = progress if progress is not None else Progress()
    rng = random.Random(spec.seed)
    url = f"{spec.base_url}/v1/{'chat/completions' if spec.api == 'chat' else 'completions'}"
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    outcomes = progress.outcomes
    async with aiohttp.ClientSession(
        connector=connector,
        trace_configs=[timing_trace_config()],
        timeout=aiohttp.ClientTimeout(total=None),  # each request has its own --timeout
    ) as session:
        total = spec.warmup + spec.requests_per_point * len(points)
        planned, progress.input_len_method = await plan_requests(session, spec, total, rng)
        warm = [p.body for p in planned[: spec.warmup]]
        await asyncio.gather(
            *(
                stream_request(session, url, b, headers=spec.headers, timeout_s=spec.timeout_s)
                for b in warm
            )
        )
        offset = spec.warmup
        for point in points:
            bodies = planned[offset : offset + spec.requests_per_point]
            offset += spec.requests_per_point
            progress.current, progress.current_records = point, []
            on_point(point, len(bodies))
            outcome = await _run_point(
                session, spec, url, point, bodies, writer, on_record, rng, progress.current_records
            )
            progress.current = None
            outcomes.append(outcome)
            failed = sum(1 for r in outcome.records if not r.ok)
            if failed and await _health(session, spec.base_url) != 200:
                return BenchRun(
                    outcomes,
                    EndpointError(
                        f"the server at {spec.base_url} stopped answering /health during "
                        f"{point.label} ({failed} request(s) failed); the sweep stopped",
                        fix="check the engine log (servekit plan --from-log LOG) and restart it",
                    ),
                )
    return BenchRun(outcomes)


async def _run_point(
    session: aiohttp.ClientSession,
    spec: BenchSpec,
    url: str,
    point: PointSpec,
    bodies: list[Planned],
    writer: RecordWriter,
    on_record: Callable[[RequestRecord], None],
    rng: random.Random,
    records: list[RequestRecord],
) -> PointOutcome:
    await _warm_connections(session, spec.base_url, point.concurrency or 8)
    before: Snapshot | None = await scrape(session, spec.base_url)
    maxima: dict[str, float] = {}
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_gauges(session, spec.base_url, maxima, stop))
    loop_lags: list[float] = []
    monitor = asyncio.create_task(_monitor_loop(loop_lags, stop))
    cpu_start, wall_start = time.process_time(), time.monotonic()

    async def send(index: int, scheduled_ns: int) -> None:
        timed = await stream_request(
            session, url, bodies[index].body, headers=spec.headers, timeout_s=spec.timeout_s
        )
        await asyncio.sleep(0)  # let other streams stamp their bytes before this bookkeeping
        record = to_record(f"{point.label}-{index}", point.label, scheduled_ns, timed)
        if record.ok and record.output_tokens != bodies[index].output_len:
            short.append((record.output_tokens, bodies[index].output_len))
        writer.write(record)
        records.append(record)
        on_record(record)

    lags: list[float] = []
    short: list[tuple[int, int]] = []
    try:
        await _drive(point, bodies, send, lags, rng)
    finally:
        stop.set()
        await asyncio.gather(sampler, monitor, return_exceptions=True)
    cpu_util = (time.process_time() - cpu_start) / max(time.monotonic() - wall_start, 1e-9)
    after = await scrape(session, spec.base_url)
    warnings, figures = certify(loop_lags, lags, cpu_util)
    server = server_block(before, after, maxima)
    warnings = _length_warnings(short) + warnings
    warnings += _token_mismatch(records, server.get("generation_tokens"))
    client: dict[str, object] = {"valid": not warnings, "warnings": warnings, **figures}
    return PointOutcome(point, records, server, warnings, client)


def _token_mismatch(records: list[RequestRecord], generated: object) -> list[str]:
    """Flag a point whose output tokens disagree with the server's generation counter.

    Only checked when every request succeeded (failed streams leave tokens the client
    never counted) and the server exposes `vllm:generation_tokens_total`.
    """
    if not isinstance(generated, int | float) or not records or not all(r.ok for r in records):
        return []
    counted = sum(r.output_tokens for r in records)
    if int(generated) == counted:
        return []
    return [
        f"the server generated {int(generated)} tokens during the point but the client "
        f"counted {counted}: another client shares the server, or usage is misreported"
    ]


async def _drive(
    point: PointSpec,
    bodies: list[Planned],
    send: Callable[[int, int], Awaitable[None]],
    lags: list[float],
    rng: random.Random,
) -> None:
    """Send a point's requests: closed loop by workers, or open loop on the schedule."""
    if point.concurrency is not None:
        queue = iter(range(len(bodies)))

        async def worker() -> None:
            for index in queue:
                await send(index, time.monotonic_ns())

        await asyncio.gather(*(worker() for _ in range(point.concurrency)))
        return
    assert point.rate_rps is not None
    offsets = _arrivals(point, len(bodies), rng)
    cap = asyncio.Semaphore(point.max_concurrency or len(bodies))
    start = time.monotonic_ns()
    tasks = []

    async def capped(index: int, scheduled_ns: int) -> None:
        # Send lag is the client's own lateness, measured before any wait for a slot
        # under --max-concurrency (that wait is the cap working, not the client lagging).
        lags.append((time.monotonic_ns() - scheduled_ns) / 1e6)
        async with cap:
            await send(index, scheduled_ns)

    try:
        for index, offset_s in enumerate(offsets):
            scheduled = start + int(offset_s * 1e9)
            delay = (scheduled - time.monotonic_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(capped(index, scheduled)))
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


LOOP_TICK_S = 0.01
MAX_LOOP_LAG_P99_MS = 20.0  # measured: <1% ITL error at p99 lag up to 17 ms (c=128)
MAX_SEND_LAG_P99_MS = 10.0
MAX_CPU_UTIL = 0.9


async def _monitor_loop(lags: list[float], stop: asyncio.Event) -> None:
    """Sample event-loop lag: how late a 10 ms sleep wakes up."""
    while not stop.is_set():
        start = time.monotonic()
        await asyncio.sleep(LOOP_TICK_S)
        lags.append((time.monotonic() - start - LOOP_TICK_S) * 1000)


def certify(
    loop_lags: list[float], send_lags: list[float], cpu_util: float
) -> tuple[list[str], dict[str, float | None]]:
    """The client's self-check for one point: is the client, not the server, the bottleneck?

    A point is invalid when the event loop's p99 lag exceeds 20 ms, the p99 lag of sends
    behind their schedule exceeds 10 ms, or the client process used more than 90% of a core.
    """
    loop_p99 = distribution(loop_lags, ci=False).p99
    send_p99 = distribution(send_lags, ci=False).p99
    warnings = []
    if loop_p99 is not None and loop_p99 > MAX_LOOP_LAG_P99_MS:
        warnings.append(f"client event loop lagged {loop_p99:.1f} ms (p99): timings inflated")
    if send_p99 is not None and send_p99 > MAX_SEND_LAG_P99_MS:
        warnings.append(f"requests left {send_p99:.1f} ms behind schedule (p99)")
    if cpu_util > MAX_CPU_UTIL:
        warnings.append(f"client used {cpu_util:.0%} of a core: it may be the bottleneck")
    return warnings, {
        "loop_lag_ms_p99": None if loop_p99 is None else round(loop_p99, 3),
        "send_lag_ms_p99": None if send_p99 is None else round(send_p99, 3),
        "cpu_util": round(cpu_util, 3),
    }


def _arrivals(point: PointSpec, count: int, rng: random.Random) -> list[float]:
    assert point.rate_rps is not None
    if point.arrival == "constant":
        return constant_arrivals(point.rate_rps, count)
    if point.arrival.startswith("gamma:"):
        return gamma_arrivals(point.rate_rps, float(point.arrival[6:]), count, rng)
    return poisson_arrivals(point.rate_rps, count, rng)


def _length_warnings(short: list[tuple[int, int]]) -> list[str]:
    if not short:
        return []
    got, wanted = short[0]
    return [
        f"{len(short)} request(s) did not get the output length asked for (e.g. {got} of "
        f"{wanted} tokens): the server ignored max_tokens/min_tokens/ignore_eos"
    ]
