"""The load drivers (shell, asyncio): closed loop, open loop and the open loop's schedule.

Closed loop: `concurrency` workers each send the next request as soon as their previous one
ends. Open loop: requests are sent at their scheduled arrival times (`arrival_schedule`:
Poisson, gamma or constant, or a trace's own times), optionally capped by `max_concurrency`.
A `Share` is what one sending process does during a point (all of it, or its part under
`bench.pool`); `drive_share` runs it while measuring the client for `bench.selfcheck`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from servekit.bench.requests import to_record
from servekit.bench.selfcheck import monitor_loop
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.turns import Turns
from servekit.client.endpoint import Endpoint
from servekit.records import RequestRecord
from servekit.workload.synthetic import arrival_offsets

Sender = Callable[[int, int], Awaitable[None]]
Taker = Callable[[], "int | None"]

Emit = Callable[[int, RequestRecord], None]


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
    monitor = asyncio.create_task(monitor_loop(loop_lags, stop))
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


def point_deadline(spec: BenchSpec, start_ns: int) -> int | None:
    """When a point starting at `start_ns` stops starting requests (`duration_per_point_s`)."""
    if spec.duration_per_point_s is None:
        return None
    return start_ns + int(spec.duration_per_point_s * 1e9)


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


def arrival_schedule(
    point: PointSpec, count: int, rng: random.Random
) -> tuple[tuple[int, float], ...]:
    """An open-loop point's numbered arrival offsets (s): the point's explicit schedule (a
    trace replay), else drawn by its arrival process."""
    if point.schedule is not None:
        return tuple(enumerate(point.schedule[:count]))
    assert point.rate_rps is not None  # a point is closed (concurrency) or open (rate)
    return tuple(enumerate(arrival_offsets(point.arrival, point.rate_rps, count, rng)))
