"""Offline simulation on a virtual clock (core): closed-loop and open-loop load points.

Produces the same `RequestRecord`s a real load test writes, with nanosecond times on the
virtual clock, far faster than real time. A closed loop keeps `concurrency` requests in
flight and sends the next one the moment one finishes; an open loop sends requests at the
arrival times of `servekit.workload.synthetic` (Poisson, gamma or constant), as bench does.
The loop is driven by a point's `Traffic`: the fixed-length requests of a `LoadPoint`, or a
trace replay, sessions or agent loops (`servekit.sim.traffic`).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import random
from dataclasses import dataclass
from typing import Any, Protocol

from servekit.errors import SimulationError
from servekit.records import RequestRecord
from servekit.sim.engine import Engine, SimRequest
from servekit.sim.traffic import SessionsPoint, SessionsTraffic, TracePoint, TraceTraffic
from servekit.workload.synthetic import arrival_offsets

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One load level: a concurrency (closed loop) or an arrival rate (open loop).

    `arrival` names the open loop's arrival process: poisson, constant or gamma:SHAPE.
    """

    label: str
    requests: int
    input_len: int
    output_len: int
    temperature: float = 0.0
    concurrency: int | None = None
    rate_rps: float | None = None
    arrival: str = "poisson"

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate_rps is None):
            raise SimulationError(
                "a load point needs exactly one of concurrency or rate_rps",
                fix="set concurrency for a closed loop or rate_rps for an open one",
            )
        if self.requests <= 0 or self.input_len <= 0 or self.output_len <= 0:
            raise SimulationError(
                "requests, input_len and output_len must be positive",
                fix="give each a count of at least 1",
            )


@dataclass(frozen=True, slots=True)
class PointRun:
    """The outcome of one simulated load point.

    Attributes:
        records: one record per request, in completion order.
        end_ns: virtual time when the last request finished.
        running_max: most requests running in one step.
        waiting_max: most requests waiting after a step.
        kv_usage_max: highest fraction of KV blocks in use after a step.
        samples: (seconds since the point started, KV usage, running, waiting), every
            0.25 s of simulated time, as a live run samples /metrics.
    """

    records: list[RequestRecord]
    end_ns: int
    running_max: int
    waiting_max: int
    kv_usage_max: float
    samples: tuple[tuple[float, float, int, int], ...] = ()


SAMPLE_EVERY_NS = 250_000_000


@dataclass(slots=True)
class _Open:
    scheduled_ns: int
    sent_ns: int
    chunks_ns: list[int]
    chunk_tokens: list[int]
    key: int
    request: SimRequest


class Traffic(Protocol):
    """What a load point sends: requests that arrive at planned times, and the requests that
    a finished one releases (a closed loop's next request, a session's next turn).

    Keys are the traffic's own handles for its planned requests. A `refusable` traffic's
    requests that the engine refuses (longer than max_model_len) end at once as failures;
    otherwise the refusal is raised.
    """

    refusable: bool
    # True: a request's send is its arrival time (the client sends then; the engine takes it
    # at its next step), so TTFT includes the wait for the step in flight, as a live client
    # measures it. False: the send is when the engine next looks (the fixed-length open
    # loop's convention, kept so its records stay as they were).
    sends_at_arrival: bool

    def start(self, start_ns: int, rng: random.Random) -> list[tuple[int, int]]:
        """The first arrivals: (virtual time in ns, key), in time order."""
        ...

    def request(self, rid: str, key: int) -> SimRequest:
        """The engine request for an arrival, made when it is sent."""
        ...

    def finished(
        self, key: int, request: SimRequest, now_ns: int, error: str | None
    ) -> tuple[dict[str, Any], list[tuple[int, int]]]:
        """A request ended at `now_ns` (or was refused with `error`, the engine's message):
        its record's fields beyond the timeline, and the arrivals it releases (those due by
        `now_ns` are sent at once, in order)."""
        ...


class _FixedTraffic:
    """A `LoadPoint`'s fixed-length requests: a closed loop or an open loop's arrivals."""

    refusable = False
    sends_at_arrival = False

    def __init__(self, point: LoadPoint) -> None:
        self.point = point
        self.issued = 0
        self.fields: dict[str, Any] = {"prompt_tokens": point.input_len, "finish_reason": "length"}

    def start(self, start_ns: int, rng: random.Random) -> list[tuple[int, int]]:
        point = self.point
        if point.concurrency is not None:
            return [(start_ns, 0)] * min(point.concurrency, point.requests)
        assert point.rate_rps is not None
        offsets = arrival_offsets(point.arrival, point.rate_rps, point.requests, rng)
        return [(start_ns + int(offset * NS), 0) for offset in offsets]

    def request(self, rid: str, key: int) -> SimRequest:
        point = self.point
        self.issued += 1
        return SimRequest(rid, point.input_len, point.output_len, point.temperature)

    def finished(
        self, key: int, request: SimRequest, now_ns: int, error: str | None
    ) -> tuple[dict[str, Any], list[tuple[int, int]]]:
        point = self.point
        more = point.concurrency is not None and self.issued < point.requests
        return self.fields, [(now_ns, 0)] if more else []


AnyPoint = LoadPoint | TracePoint | SessionsPoint
"""A load point of fixed-length requests, a trace replay, or sessions."""


def run_point(
    engine: Engine, point: AnyPoint, rng: random.Random, *, start_ns: int = 0
) -> PointRun:
    """Run one load point to completion on an engine.

    Records come in completion order, as a live run would append them.
    """
    traffic: Traffic
    if isinstance(point, LoadPoint):
        traffic = _FixedTraffic(point)
    elif isinstance(point, TracePoint):
        traffic = TraceTraffic(point)
    else:
        traffic = SessionsTraffic(point)
    return run_traffic(engine, traffic, point.label, rng, start_ns=start_ns)


def run_traffic(
    engine: Engine, traffic: Traffic, label: str, rng: random.Random, *, start_ns: int = 0
) -> PointRun:
    """Run a point's traffic to completion on an engine; records in completion order."""
    # Arrivals still to send, latest first (pop() gives the earliest; ties in arrival order).
    pending = [(at, seq, key) for seq, (at, key) in enumerate(traffic.start(start_ns, rng))]
    pending.reverse()
    seq = len(pending)
    at_arrival = traffic.sends_at_arrival
    issued = 0
    now = start_ns
    open_: dict[str, _Open] = {}
    records: list[RequestRecord] = []
    running_max = waiting_max = 0
    kv_max = 0.0
    samples: list[tuple[float, float, int, int]] = []
    next_sample = start_ns
    clock = start_ns  # a window's look-ahead of `now`, for arrivals

    # Sends due now, first in first out: a refused send finishes at once and may release
    # the next session's send, which goes here rather than down the stack (a long run of
    # refusals would otherwise recurse once per session).
    due: collections.deque[tuple[int, int, int]] = collections.deque()

    def send_due() -> None:
        while due:
            send(*due.popleft())

    def send(at_ns: int, scheduled_ns: int, key: int) -> None:
        nonlocal issued
        rid = f"{label}-{issued}"
        issued += 1
        request = traffic.request(rid, key)
        open_[rid] = _Open(scheduled_ns, at_ns, [], [], key, request)
        if traffic.refusable:
            try:
                engine.add(request)
            except SimulationError as exc:  # too long for the model: a live server's 400
                finish(rid, exc.message)
        else:
            engine.add(request)

    def finish(rid: str, error: str | None = None) -> None:
        nonlocal seq
        state = open_.pop(rid)
        first = state.chunks_ns[0] if state.chunks_ns else None
        fields, released = traffic.finished(state.key, state.request, now, error)
        records.append(
            RequestRecord(
                id=rid,
                point=label,
                scheduled_ns=state.scheduled_ns,
                sent_ns=state.sent_ns,
                first_token_ns=first,
                first_answer_ns=first,
                end_ns=now,
                chunk_ns=tuple(state.chunks_ns),
                chunk_tokens=tuple(state.chunk_tokens),
                text_chunks=len(state.chunks_ns),  # every simulated token has text
                token_source="engine",  # noqa: S106 - a count's source, no secret
                output_tokens=sum(state.chunk_tokens),
                **fields,
            )
        )
        for at, key in released:
            if at <= now:
                due.append((now, now, key))
            else:
                bisect.insort(pending, (at, seq, key), key=_latest_first)
                seq += 1

    def arrival_due(duration_s: float) -> bool:
        """Advance a copy of the clock by one step; true once the next arrival is due."""
        nonlocal clock
        clock += max(1, round(duration_s * NS))
        return pending[-1][0] <= clock

    while pending or not engine.idle:
        while pending and pending[-1][0] <= now:
            at, _, key = pending.pop()
            send(at if at_arrival else now, at, key)
            send_due()
        if engine.idle:
            if not pending:  # the last sends were refused
                break
            now = max(now, pending[-1][0])
            continue
        running_max = max(running_max, len(engine.running))
        clock = now
        window = engine.decode_window(arrival_due if pending else None)
        if window is not None:
            waiting_max = max(waiting_max, len(engine.waiting))
            ticks = [round(duration * NS) for duration in window.durations_s]
            if min(ticks) < 1:  # a step lasts at least 1 ns, as below
                ticks = [max(1, tick) for tick in ticks]
            times = list(itertools.accumulate(ticks, initial=now))[1:]
            now = times[-1]
            last = len(times) - 1
            index = bisect.bisect_left(times, next_sample)
            while index <= last:  # the steps after which a live run's sampler fires
                running = len(engine.running) if index == last else len(window.requests)
                kv = round(window.kv_usage[index], 4)
                samples.append(((times[index] - start_ns) / NS, kv, running, len(engine.waiting)))
                next_sample = times[index] + SAMPLE_EVERY_NS
                index = bisect.bisect_left(times, next_sample, index + 1)
            kv_max = max(kv_max, *window.kv_usage)
            tokens = window.tokens
            for index, rid in enumerate(window.requests):
                state = open_[rid]
                state.chunks_ns.extend(times)
                state.chunk_tokens.extend([1] * len(times) if tokens is None else tokens[index])
            for rid in window.finished:
                finish(rid)
                send_due()
            continue
        result = engine.step()
        now += max(1, round(result.duration_s * NS))
        waiting_max = max(waiting_max, len(engine.waiting))
        kv_max = max(kv_max, engine.kv_usage)
        if now >= next_sample:
            samples.append(
                ((now - start_ns) / NS, round(engine.kv_usage, 4), len(engine.running),
                 len(engine.waiting))
            )  # fmt: skip
            next_sample = now + SAMPLE_EVERY_NS
        for rid, tokens_gained in result.gained:
            state = open_[rid]
            state.chunks_ns.append(now)
            state.chunk_tokens.append(tokens_gained)
        for rid in result.finished:
            finish(rid)
            send_due()
    return PointRun(records, now, running_max, waiting_max, kv_max, tuple(samples))


def _latest_first(entry: tuple[int, int, int]) -> tuple[int, int]:
    return (-entry[0], -entry[1])
