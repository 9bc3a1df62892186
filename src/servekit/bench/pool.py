"""Send a point's load from several processes, `servekit bench --workers N` (shell).

One client core drives about 90-100k output tokens/s (benchmarks/README.md). Past that the
client, not the server, is the bottleneck and `certify` marks the point invalid. A
`WorkerPool` starts N spawned processes, each with its own event loop and keep-alive
connections, that stay up for the whole run. For each point the parent hands every worker its
share:

- closed loop: the concurrency is split as evenly as possible, and every worker takes the
  next request index from one shared counter, so the total in flight stays at the concurrency
  until the requests (or the duration) run out;
- open loop: arrival i goes to worker i mod N at its scheduled time, measured from one start
  time (CLOCK_MONOTONIC is shared by every process); a `--max-concurrency` cap is split.

Workers send each finished request's record back over a queue; the parent writes it to
records.jsonl at once, so the records of all workers merge in one file in end order.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from dataclasses import dataclass, replace
from multiprocessing.context import SpawnProcess
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from servekit.bench.loops import ClientLoad, Emit, Share, Taker, send_share
from servekit.bench.requests import api_path
from servekit.bench.spec import BenchSpec
from servekit.client.endpoint import open_endpoint
from servekit.errors import SimulationError
from servekit.records import RequestRecord

_POLL_S = 0.5
_READY_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class _Job:
    label: str
    bodies: list[dict[str, Any]]
    count: int
    share: Share


def split(total: int, parts: int) -> list[int]:
    """`total` split into `parts` integers that differ by at most one, larger first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def shares(share: Share, workers: int) -> list[Share]:
    """One point's share for each of `workers` processes."""
    if not share.open_loop:
        return [replace(share, concurrency=c) for c in split(share.concurrency, workers)]
    caps = split(share.cap, workers) if share.cap is not None else [None] * workers
    return [
        replace(share, schedule=share.schedule[i::workers], cap=caps[i] or None)
        for i in range(workers)
    ]


class WorkerPool:
    """N processes that send load; use as a context manager (they stop on exit)."""

    def __init__(self, spec: BenchSpec, workers: int) -> None:
        ctx = mp.get_context("spawn")
        self._counter: Synchronized[int] = ctx.Value("q", 0)
        self._results: mp.Queue[tuple[Any, ...]] = ctx.Queue()
        self._inboxes: list[mp.Queue[_Job | None]] = [ctx.Queue() for _ in range(workers)]
        worker_spec = replace(spec, dataset=None)  # bodies travel per point, not the dataset
        self._procs: list[SpawnProcess] = [
            ctx.Process(
                target=_worker_main,
                args=(i, worker_spec, inbox, self._results, self._counter),
                daemon=True,
                name=f"servekit-bench-worker-{i}",
            )
            for i, inbox in enumerate(self._inboxes)
        ]

    def __enter__(self) -> WorkerPool:
        """Start the workers and wait until each has its event loop running.

        Raises:
            SimulationError: a worker did not come up within 60 s.
        """
        for proc in self._procs:
            proc.start()
        for _ in self._procs:
            try:
                self._results.get(timeout=_READY_TIMEOUT_S)
            except queue.Empty:
                self.__exit__(None, None, None)
                raise SimulationError(
                    f"bench worker processes did not start within {_READY_TIMEOUT_S:.0f} s",
                    fix="rerun with --workers 1",
                ) from None
        return self

    def __exit__(self, *_exc: object) -> None:
        for inbox in self._inboxes:
            with contextlib.suppress(Exception):
                inbox.put(None)
        deadline = time.monotonic() + 2.0
        for proc in self._procs:
            proc.join(max(deadline - time.monotonic(), 0.0))
            if proc.is_alive():
                proc.kill()  # workers ignore SIGTERM (see _worker_main)
                proc.join(2.0)

    async def send_point(
        self, label: str, bodies: list[dict[str, Any]], share: Share, emit: Emit
    ) -> list[ClientLoad]:
        """Send one point from every worker; `emit` each record as it arrives.

        Raises:
            SimulationError: a worker process died before finishing its share.
        """
        with self._counter.get_lock():
            self._counter.value = 0
        for inbox, part in zip(self._inboxes, shares(share, len(self._procs)), strict=True):
            inbox.put(_Job(label, bodies, len(bodies), part))
        loads: list[ClientLoad] = []
        loop = asyncio.get_running_loop()
        while len(loads) < len(self._procs):
            try:
                msg = await loop.run_in_executor(None, self._results.get, True, _POLL_S)
            except queue.Empty:
                dead = [p.name for p in self._procs if not p.is_alive()]
                if dead:
                    raise SimulationError(
                        f"bench worker process {dead[0]} exited during {label}",
                        fix="rerun with --workers 1 to see the error in this process",
                    ) from None
                continue
            if msg[0] == "record":
                emit(msg[1], msg[2])
            elif msg[0] == "done":
                loads.append(msg[1])
        return loads


def _worker_main(
    worker: int,
    spec: BenchSpec,
    inbox: mp.Queue[_Job | None],
    results: mp.Queue[tuple[Any, ...]],
    counter: Synchronized[int],
) -> None:
    # The parent handles Ctrl-C and SIGTERM (a process group gets both) and stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        asyncio.run(_worker_loop(worker, spec, inbox, results, counter))
    except BaseException as exc:  # say why on one line, secrets removed; no raw traceback
        text = spec.redactor.redact(f"{type(exc).__name__}: {exc}")
        print(f"servekit bench worker {worker}: {text}", file=sys.stderr, flush=True)
        os._exit(1)


async def _worker_loop(
    worker: int,
    spec: BenchSpec,
    inbox: mp.Queue[_Job | None],
    results: mp.Queue[tuple[Any, ...]],
    counter: Synchronized[int],
) -> None:
    loop = asyncio.get_running_loop()
    watchdog = asyncio.create_task(_exit_with_parent())
    async with open_endpoint(spec.base_url, spec.headers) as endpoint:
        results.put(("ready", worker))
        while (job := await loop.run_in_executor(None, inbox.get)) is not None:
            await endpoint.warm(job.share.concurrency or 8)

            def emit(index: int, record: RequestRecord) -> None:
                results.put(("record", index, record))

            load = await send_share(
                endpoint,
                api_path(spec),
                spec,
                job.label,
                job.bodies,
                job.share,
                _shared_taker(counter, job.count, job.share.deadline_ns),
                emit,
            )
            results.put(("done", load))
    watchdog.cancel()


async def _exit_with_parent() -> None:
    """Stop this worker at once if the parent dies (kill -9): no orphan keeps sending load."""
    parent = mp.parent_process()
    while parent is not None and parent.is_alive():
        await asyncio.sleep(_POLL_S)
    os._exit(1)


def _shared_taker(counter: Synchronized[int], count: int, deadline_ns: int | None) -> Taker:
    """Like `loops.closed_taker`, but the next index is shared by every worker process."""

    def take() -> int | None:
        if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
            return None
        with counter.get_lock():
            index = counter.value
            if index >= count:
                return None
            counter.value = index + 1
        return index

    return take
