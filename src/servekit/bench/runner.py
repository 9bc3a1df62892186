"""Run a load test against an OpenAI-compatible server (shell, asyncio).

Every point runs in order, closed or open loop (`bench.loops`); with `BenchSpec.sessions`
each point runs multi-turn sessions or agent loops instead (`bench.sessions`): the loops
then drive sessions, not requests. Every request becomes a `RequestRecord`, appended and
flushed the moment it ends. `/metrics` is scraped before and after each point and sampled
during it for the gauges (`bench.gauges`); `measure_point` then judges the point with the
client's self-check (`bench.selfcheck`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from servekit.analyze.traffic import ScheduleBound, schedule_block, schedule_warning
from servekit.bench.gauges import sample_gauges
from servekit.bench.loops import (
    ClientLoad,
    Emit,
    Share,
    arrival_schedule,
    closed_taker,
    drive_share,
    point_deadline,
    send_share,
)
from servekit.bench.replay import prompt_length_warnings
from servekit.bench.requests import (
    api_path,
    plan_requests,
    probe_token_ids,
    request_body,
    to_record,
)
from servekit.bench.scrape import Snapshot, scrape, server_block
from servekit.bench.selfcheck import MAX_SEND_LAG_P99_MS, certify, length_warnings, token_mismatch
from servekit.bench.sessions import SessionPoints
from servekit.bench.spec import BenchSpec, Planned, PointOutcome, PointSpec
from servekit.bench.store import RecordWriter
from servekit.client.endpoint import Endpoint, open_endpoint
from servekit.client.transport import Transport
from servekit.errors import EndpointError
from servekit.records import RequestRecord
from servekit.results.summary import ClientBlock
from servekit.workload.load import point_rng
from servekit.workload.sessions import arrival_rng

POOL_START_LEAD_S = 0.3  # worker processes start a point together, this long after dispatch


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
        for index, (point, count) in enumerate(zip(points, counts, strict=True)):
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
                point_rng(spec.seed, index),  # the simulator's arrivals for this point
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


async def _run_point(
    endpoint: Endpoint,
    spec: BenchSpec,
    path: str,
    point: PointSpec,
    bodies: list[Planned],
    writer: RecordWriter,
    on_record: Callable[[RequestRecord], None],
    arrivals: random.Random,
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
            schedule=()
            if point.concurrency is not None
            else arrival_schedule(point, len(bodies), arrivals),
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
            schedule=() if closed else arrival_schedule(point, len(jobs), arrivals),
            cap=point.max_concurrency,
            start_ns=start,
            deadline_ns=point_deadline(spec, start),
        )

        async def run(index: int, scheduled_ns: int) -> None:
            await sessions.run(jobs[index], point.label, scheduled_ns, share.deadline_ns, keep)

        return [await drive_share(share, closed_taker(len(jobs), share.deadline_ns), run)]

    return await measure_point(endpoint, spec, point, records, send, short)


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
        sample_gauges(endpoint, maxima, stop, samples, spec.metrics_interval_s, problems)
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
    warnings = length_warnings(short) + warnings
    warnings += token_mismatch(records, server.generation_tokens)
    client = ClientBlock(
        valid=not warnings,  # a scrape problem costs server figures, not the client's timing
        warnings=warnings + sorted(problems),
        loop_lag_ms_p99=figures["loop_lag_ms_p99"],
        send_lag_ms_p99=figures["send_lag_ms_p99"],
        cpu_util=figures["cpu_util"],
    )
    return PointOutcome(point, records, server, warnings, client)
