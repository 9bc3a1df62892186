"""Run a load test against an OpenAI-compatible server (shell, asyncio).

Closed loop: `concurrency` workers each send the next request as soon as their previous one
ends. Open loop: requests are sent at their scheduled arrival times (Poisson, gamma or
constant), optionally capped by `max_concurrency`. With `BenchSpec.sessions` each point
runs multi-turn sessions or agent loops instead (`bench.sessions`): the loops then drive
sessions, not requests. Every request becomes a `RequestRecord`, appended and flushed the
moment it ends. `/metrics` is scraped before and after each point and sampled during it for
the gauges (`measure_point`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from servekit.analyze.summarize import distribution
from servekit.analyze.traffic import ScheduleBound, schedule_block, schedule_warning
from servekit.bench.replay import prompt_length_warnings
from servekit.bench.requests import api_path, plan_requests, probe_token_ids, request_body
from servekit.bench.scrape import Snapshot, scrape, server_block
from servekit.bench.sessions import SessionPoints
from servekit.bench.spec import BenchSpec, Planned, PointOutcome, PointSpec
from servekit.bench.store import RecordWriter
from servekit.bench.turns import Turns
from servekit.client.endpoint import Endpoint, open_endpoint
from servekit.client.http import TimedStream
from servekit.client.transport import Transport
from servekit.errors import EndpointError
from servekit.records import RequestRecord
from servekit.results.summary import ClientBlock
from servekit.workload.sessions import arrival_rng
from servekit.workload.synthetic import arrival_offsets

SAMPLE_EVERY_S = 0.25
POOL_START_LEAD_S = 0.3  # worker processes start a point together, this long after dispatch
Sender = Callable[[int, int], Awaitable[None]]


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


GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")


async def _sample_gauges(
    endpoint: Endpoint,
    maxima: dict[str, float],
    stop: asyncio.Event,
    samples: list[list[float]],
    every_s: float = SAMPLE_EVERY_S,
    problems: set[str] | None = None,
) -> None:
    """Scrape /metrics every `every_s` (`--metrics-interval`): gauge maxima, and (seconds
    since the point started, KV usage, running, waiting) samples for plots over time; what
    was wrong with a scrape goes to `problems`."""
    start = time.monotonic()
    while not stop.is_set() and every_s > 0:
        snap = await scrape(endpoint)
        if snap is not None and snap.problem is not None and problems is not None:
            problems.add(snap.problem)
        if snap is not None:
            for name, value in snap.gauges.items():
                maxima[name] = max(maxima.get(name, value), value)
            if all(g in snap.gauges for g in GAUGES):
                values = [snap.gauges[g] for g in GAUGES]
                samples.append([round(time.monotonic() - start, 3), *values])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


class PointSender(Protocol):
    """Sends a point's requests from other processes (`bench.pool.WorkerPool`)."""

    async def send_point(
        self, label: str, bodies: list[dict[str, Any]], share: Share, emit: Emit
    ) -> list[ClientLoad]: ...


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
    token_ids: bool | None = None  # whether requests asked for token ids (None: not yet)


async def run_points(
    spec: BenchSpec,
    points: list[PointSpec],
    writer: RecordWriter,
    *,
    progress: Progress | None = None,
    on_record: Callable[[RequestRecord], None] = lambda _: None,
    on_point: Callable[[PointSpec, int], None] = lambda _p, _n: None,
    pool: PointSender | None = None,
    transport: Transport | None = None,
) -> BenchRun:
    """Run every point in order; stop early (with the reason) if the server dies.

    With a `pool`, other processes send each point's requests and this one keeps the records
    (session points always run in this process: a session's turns depend on each other).
    Requests go over `transport` when given (a test's fake server), else over servekit's
    own HTTP session.
    """
    progress = progress if progress is not None else Progress()
    rng = random.Random(spec.seed)
    path = api_path(spec)
    outcomes = progress.outcomes
    async with open_endpoint(spec.base_url, spec.headers, transport=transport) as endpoint:
        if (dead := await _dead_at_start(endpoint, spec)) is not None:
            return BenchRun(outcomes, dead)
        if spec.token_ids is None:  # auto: ask for token ids when the server gives them
            spec = dataclasses.replace(spec, token_ids=await probe_token_ids(endpoint, spec))
        progress.token_ids = spec.token_ids
        if spec.sessions is not None:
            return await _run_session_points(
                endpoint, spec, path, points, writer, progress, on_record, on_point, rng
            )
        counts = [point.requests or spec.requests_per_point for point in points]
        total = spec.warmup + sum(counts)
        planned, progress.input_len_method = await plan_requests(endpoint, spec, total, rng)
        warm = [p.body for p in planned[: spec.warmup]]
        await asyncio.gather(*(endpoint.stream(path, b, timeout_s=spec.timeout_s) for b in warm))
        offset = spec.warmup
        for point, count in zip(points, counts, strict=True):
            bodies = planned[offset : offset + count]
            offset += count
            progress.current, progress.current_records = point, []
            on_point(point, len(bodies))
            outcome = await _run_point(
                endpoint,
                spec,
                path,
                point,
                bodies,
                writer,
                on_record,
                rng,
                progress.current_records,
                pool,
            )
            progress.current = None
            outcomes.append(outcome)
            if (stopped := await _server_died(endpoint, spec, outcome)) is not None:
                return BenchRun(outcomes, stopped)
    return BenchRun(outcomes)


async def _run_session_points(
    endpoint: Endpoint,
    spec: BenchSpec,
    path: str,
    points: list[PointSpec],
    writer: RecordWriter,
    progress: Progress,
    on_record: Callable[[RequestRecord], None],
    on_point: Callable[[PointSpec, int], None],
    rng: random.Random,
) -> BenchRun:
    """`run_points` for multi-turn sessions and agent loops (`BenchSpec.sessions`)."""
    sessions = SessionPoints(
        endpoint,
        spec,
        path,
        body_of=lambda messages, out: request_body(spec, None, out, messages),
        record_of=to_record,
    )
    progress.input_len_method = await sessions.prepare(rng, len(points))
    for index, point in enumerate(points):
        progress.current, progress.current_records = point, []
        on_point(point, sessions.user_turns(index))
        outcome = await _run_session_point(
            endpoint, spec, point, sessions, writer, on_record, progress.current_records
        )
        progress.current = None
        progress.outcomes.append(outcome)
        if (stopped := await _server_died(endpoint, spec, outcome)) is not None:
            return BenchRun(progress.outcomes, stopped)
    return BenchRun(progress.outcomes)


async def _server_died(
    endpoint: Endpoint, spec: BenchSpec, outcome: PointOutcome
) -> EndpointError | None:
    """Why the sweep stops after a point: requests failed and /health no longer answers."""
    failed = sum(1 for r in outcome.records if not r.ok)
    if not failed or await endpoint.health() == 200:
        return None
    return EndpointError(
        f"the server at {spec.base_url} stopped answering /health during "
        f"{outcome.spec.label} ({failed} request(s) failed); the sweep stopped",
        fix="check the engine log (servekit plan --from-log LOG) and restart it",
    )


async def _dead_at_start(endpoint: Endpoint, spec: BenchSpec) -> EndpointError | None:
    """Why no request should be sent: `/health` does not answer, or answers 5xx (a 404 is a
    server without the route, not a dead one)."""
    status = await endpoint.health()
    if status is not None and status < 500:
        return None
    return EndpointError(
        f"the server at {spec.base_url} answers /health with {status or 'nothing'} before "
        "the run; no request was sent",
        fix="check the engine log (servekit plan --from-log LOG) and that loading finished",
    )


@dataclass(frozen=True, slots=True)
class Share:
    """What one sending process does during a point.

    Closed loop: `concurrency` senders take request indices from a shared taker. Open loop:
    `schedule` lists (index, offset_s) from `start_ns`, with at most `cap` in flight.
    """

    open_loop: bool
    concurrency: int = 0
    schedule: tuple[tuple[int, float], ...] = ()
    cap: int | None = None
    start_ns: int = 0
    deadline_ns: int | None = None


@dataclass(frozen=True, slots=True)
class ClientLoad:
    """How hard one sending process worked during a point (for `certify`)."""

    loop_lags_ms: list[float]
    send_lags_ms: list[float]
    cpu_util: float


Emit = Callable[[int, RequestRecord], None]


async def send_share(
    endpoint: Endpoint,
    path: str,
    spec: BenchSpec,
    label: str,
    bodies: list[dict[str, Any]],
    share: Share,
    take: Taker,
    emit: Emit,
) -> ClientLoad:
    """Send one process's share of a point; `emit(index, record)` as each request ends."""
    turns = Turns()

    async def send(index: int, scheduled_ns: int) -> None:
        if share.open_loop:
            await turns.turn()  # a burst of arrivals launches one per iteration too
        timed = await endpoint.stream(path, bodies[index], timeout_s=spec.timeout_s)
        # One request's record and its successor's launch per loop iteration: streams whose
        # bytes arrived meanwhile stamp them first (see bench/turns.py).
        await turns.turn()
        emit(index, to_record(f"{label}-{index}", label, scheduled_ns, timed))

    return await drive_share(share, take, send)


async def drive_share(share: Share, take: Taker, send: Sender) -> ClientLoad:
    """Run `send` for a share's indices (closed or open loop) while measuring the client:
    event-loop lag, send lag behind the schedule (open loop) and CPU use."""
    loop_lags: list[float] = []
    send_lags: list[float] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(_monitor_loop(loop_lags, stop))
    cpu_start, wall_start = time.process_time(), time.monotonic()
    try:
        if (delay := (share.start_ns - time.monotonic_ns()) / 1e9) > 0:
            await asyncio.sleep(delay)
        if share.open_loop:
            schedule = list(share.schedule)
            await drive_open(
                schedule, share.start_ns, share.cap, send, send_lags, share.deadline_ns
            )
        else:
            await drive_closed(share.concurrency, take, send)
    finally:
        stop.set()
        await asyncio.gather(monitor, return_exceptions=True)
    cpu_util = (time.process_time() - cpu_start) / max(time.monotonic() - wall_start, 1e-9)
    return ClientLoad(loop_lags, send_lags, cpu_util)


async def _run_point(
    endpoint: Endpoint,
    spec: BenchSpec,
    path: str,
    point: PointSpec,
    bodies: list[Planned],
    writer: RecordWriter,
    on_record: Callable[[RequestRecord], None],
    rng: random.Random,
    records: list[RequestRecord],
    pool: PointSender | None,
) -> PointOutcome:
    short: list[tuple[int, int]] = []

    def keep(index: int, record: RequestRecord) -> None:
        if record.ok and record.output_tokens != bodies[index].output_len:
            short.append((record.output_tokens, bodies[index].output_len))
        writer.write(record)
        records.append(record)
        on_record(record)

    async def send() -> list[ClientLoad]:
        start = time.monotonic_ns() + (int(POOL_START_LEAD_S * 1e9) if pool else 0)
        share = Share(
            open_loop=point.concurrency is None,
            concurrency=point.concurrency or 0,
            schedule=() if point.concurrency is not None else _schedule(point, len(bodies), rng),
            cap=point.max_concurrency,
            start_ns=start,
            deadline_ns=point_deadline(spec, start),
        )
        payloads = [b.body for b in bodies]
        if pool is None:
            taker = closed_taker(len(bodies), share.deadline_ns)
            return [
                await send_share(endpoint, path, spec, point.label, payloads, share, taker, keep)
            ]
        loads = await pool.send_point(point.label, payloads, share, keep)
        workers.append(len(loads))
        return loads

    workers: list[int] = []
    outcome = await measure_point(endpoint, spec, point, records, send, short)
    if workers and outcome.client is not None:  # only a pooled run says how many processes
        client = outcome.client.model_copy(update={"workers": workers[0]})  # sent the load
        outcome = dataclasses.replace(outcome, client=client)
    return outcome


async def _run_session_point(
    endpoint: Endpoint,
    spec: BenchSpec,
    point: PointSpec,
    sessions: SessionPoints,
    writer: RecordWriter,
    on_record: Callable[[RequestRecord], None],
    records: list[RequestRecord],
) -> PointOutcome:
    """A session point: concurrency = sessions in flight (closed loop), or rate = session
    arrivals per second (open loop, drawn from the seed and the point's first session only,
    as the simulator draws them); measured like any other point."""
    jobs = sessions.next_point()
    arrivals = arrival_rng(spec.seed, jobs[0].position if jobs else 0)
    short: list[tuple[int, int]] = []

    def keep(record: RequestRecord, wanted: int | None) -> None:
        if wanted is not None and record.ok and record.output_tokens != wanted:
            short.append((record.output_tokens, wanted))
        writer.write(record)
        records.append(record)
        on_record(record)

    async def send() -> list[ClientLoad]:
        start = time.monotonic_ns()
        closed = point.concurrency is not None
        share = Share(
            open_loop=not closed,
            concurrency=point.concurrency or 0,
            schedule=() if closed else _schedule(point, len(jobs), arrivals),
            cap=point.max_concurrency,
            start_ns=start,
            deadline_ns=point_deadline(spec, start),
        )

        async def run(index: int, scheduled_ns: int) -> None:
            await sessions.run(jobs[index], point.label, scheduled_ns, share.deadline_ns, keep)

        return [await drive_share(share, closed_taker(len(jobs), share.deadline_ns), run)]

    return await measure_point(endpoint, spec, point, records, send, short)


def point_deadline(spec: BenchSpec, start_ns: int) -> int | None:
    """When a point starting at `start_ns` stops starting requests (`duration_per_point_s`)."""
    if spec.duration_per_point_s is None:
        return None
    return start_ns + int(spec.duration_per_point_s * 1e9)


async def measure_point(
    endpoint: Endpoint,
    spec: BenchSpec,
    point: PointSpec,
    records: list[RequestRecord],
    send: Callable[[], Awaitable[list[ClientLoad]]],
    short: list[tuple[int, int]],
) -> PointOutcome:
    """Run one point's `send` between /metrics scrapes (and sampled during it), then judge
    it: the client's self-check, output lengths (`short`: (got, wanted) pairs) and the
    server's generation counter against the `records` kept make the point invalid; a
    scrape problem is a warning that leaves it valid (only server figures are missing)."""
    await endpoint.warm(point.concurrency or 8)
    before: Snapshot | None = await scrape(endpoint)
    maxima: dict[str, float] = {}
    stop = asyncio.Event()
    samples: list[list[float]] = []
    problems = {before.problem} if before is not None and before.problem else set()
    sampler = asyncio.create_task(
        _sample_gauges(endpoint, maxima, stop, samples, spec.metrics_interval_s, problems)
    )
    try:
        loads = await send()
    finally:
        stop.set()
        await asyncio.gather(sampler, return_exceptions=True)
    after = await scrape(endpoint)
    warnings, figures = certify(
        [lag for load in loads for lag in load.loop_lags_ms],
        [lag for load in loads for lag in load.send_lags_ms],
        max(load.cpu_util for load in loads),
        # a replay's bound is --max-schedule-lag-ms, held to its records' lags below
        max_send_lag_ms=None if point.schedule is not None else MAX_SEND_LAG_P99_MS,
    )
    if (planned := point.planned_sends(spec.requests_per_point)) is not None:
        # the summary's schedule block says the same; its lag is the replay's one send lag
        block = schedule_block(records, ScheduleBound(planned, spec.max_schedule_lag_ms), ci=False)
        figures["send_lag_ms_p99"] = block.lag_ms.p99
        if (late := schedule_warning(block)) is not None:
            warnings.append(late)
        if spec.trace is not None:
            warnings += prompt_length_warnings(records, spec.trace.requests)
    server = server_block(before, after, maxima).model_copy(update={"samples": samples})
    if after is not None and after.problem:
        problems.add(after.problem)
    warnings = _length_warnings(short) + warnings
    warnings += _token_mismatch(records, server.generation_tokens)
    client = ClientBlock(
        valid=not warnings,  # a scrape problem costs server figures, not the client's timing
        warnings=warnings + sorted(problems),
        loop_lag_ms_p99=figures["loop_lag_ms_p99"],
        send_lag_ms_p99=figures["send_lag_ms_p99"],
        cpu_util=figures["cpu_util"],
    )
    return PointOutcome(point, records, server, warnings, client)


def _token_mismatch(records: list[RequestRecord], generated: int | None) -> list[str]:
    """Flag a point whose output tokens disagree with the server's generation counter.

    Only checked when every request succeeded (failed streams leave tokens the client
    never counted) and the server exposes `vllm:generation_tokens_total`.
    """
    if generated is None or not records or not all(r.ok for r in records):
        return []
    counted = sum(r.output_tokens for r in records)
    if int(generated) == counted:
        return []
    return [
        f"the server generated {int(generated)} tokens during the point but the client "
        f"counted {counted}: another client shares the server, or usage is misreported"
    ]


Taker = Callable[[], "int | None"]


def closed_taker(count: int, deadline_ns: int | None) -> Taker:
    """Hand out request indices 0..count-1 in order, and none once the deadline has passed."""
    indices = iter(range(count))

    def take() -> int | None:
        if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
            return None
        return next(indices, None)

    return take


async def drive_closed(concurrency: int, take: Taker, send: Sender) -> None:
    """Closed loop: `concurrency` workers each send the next request when theirs ends."""

    async def worker() -> None:
        while (index := take()) is not None:
            await send(index, time.monotonic_ns())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def drive_open(
    schedule: list[tuple[int, float]],
    start_ns: int,
    cap: int | None,
    send: Sender,
    lags: list[float],
    deadline_ns: int | None = None,
) -> None:
    """Open loop: send request `index` at `start_ns + offset_s`, at most `cap` in flight.

    Arrivals scheduled at or after the deadline are not sent.
    """
    slots = asyncio.Semaphore(cap or max(len(schedule), 1))
    tasks = []

    async def capped(index: int, scheduled_ns: int) -> None:
        # Send lag is the client's own lateness, measured before any wait for a slot
        # under --max-concurrency (that wait is the cap working, not the client lagging).
        lags.append((time.monotonic_ns() - scheduled_ns) / 1e6)
        async with slots:
            await send(index, scheduled_ns)

    try:
        for index, offset_s in schedule:
            scheduled = start_ns + int(offset_s * 1e9)
            if deadline_ns is not None and scheduled >= deadline_ns:
                break
            await _wait_until(scheduled)
            tasks.append(asyncio.create_task(capped(index, scheduled)))
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


async def _wait_until(due_ns: int) -> None:
    """Sleep until `due_ns`. asyncio's timers wake up to a millisecond late (epoll waits in
    whole milliseconds, rounded up), so sleep until `SPIN_LEAD_NS` before it, then yield to
    the loop (its other work runs meanwhile) until it is due; the spin is at most a tenth
    of the wait, so a fast schedule costs little CPU."""
    wait_ns = due_ns - time.monotonic_ns()
    if wait_ns <= 0:
        return
    await asyncio.sleep((wait_ns - min(SPIN_LEAD_NS, wait_ns // 10)) / 1e9)
    while time.monotonic_ns() < due_ns:
        await asyncio.sleep(0)


SPIN_LEAD_NS = 1_500_000
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
    loop_lags: list[float],
    send_lags: list[float],
    cpu_util: float,
    *,
    max_send_lag_ms: float | None = MAX_SEND_LAG_P99_MS,
) -> tuple[list[str], dict[str, float | None]]:
    """The client's self-check for one point: is the client, not the server, the bottleneck?

    A point is invalid when the event loop's p99 lag exceeds 20 ms, the p99 lag of sends
    behind their schedule exceeds `max_send_lag_ms` (10 ms; None: not checked here, as for
    a trace replay, whose records' lags `analyze.traffic.schedule_block` holds to its own
    bound), or the client process used more than 90% of a core.
    """
    loop_p99 = distribution(loop_lags, ci=False).p99
    send_p99 = distribution(send_lags, ci=False).p99
    warnings = []
    if loop_p99 is not None and loop_p99 > MAX_LOOP_LAG_P99_MS:
        warnings.append(f"client event loop lagged {loop_p99:.1f} ms (p99): timings inflated")
    if send_p99 is not None and max_send_lag_ms is not None and send_p99 > max_send_lag_ms:
        warnings.append(f"requests left {send_p99:.1f} ms behind schedule (p99)")
    if cpu_util > MAX_CPU_UTIL:
        warnings.append(f"client used {cpu_util:.0%} of a core: it may be the bottleneck")
    return warnings, {
        "loop_lag_ms_p99": None if loop_p99 is None else round(loop_p99, 3),
        "send_lag_ms_p99": None if send_p99 is None else round(send_p99, 3),
        "cpu_util": round(cpu_util, 3),
    }


def _schedule(point: PointSpec, count: int, rng: random.Random) -> tuple[tuple[int, float], ...]:
    """An open-loop point's numbered arrival offsets (s): the point's explicit schedule (a
    trace replay), else drawn by its arrival process."""
    if point.schedule is not None:
        return tuple(enumerate(point.schedule[:count]))
    assert point.rate_rps is not None  # a point is closed (concurrency) or open (rate)
    return tuple(enumerate(arrival_offsets(point.arrival, point.rate_rps, count, rng)))


def _length_warnings(short: list[tuple[int, int]]) -> list[str]:
    if not short:
        return []
    got, wanted = short[0]
    return [
        f"{len(short)} request(s) did not get the output length asked for (e.g. {got} of "
        f"{wanted} tokens): the server ignored max_tokens/min_tokens/ignore_eos"
    ]
