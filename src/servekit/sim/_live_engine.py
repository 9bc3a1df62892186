"""The simulated engine on the wall clock (shell): one driver task, one queue per request.

The driver runs the pure engine one step at a time, sleeps until the step's end on the wall
clock (its duration times the time scale after the previous step's end), then hands every
request the tokens it gained in that step as one delivery (one streamed chunk). Requests
submitted meanwhile join the next step; when the engine is idle the driver waits for the
next submission. The crash and corruption faults act here, where the batch of each step is
known.

The server's own work (parsing requests, writing streams) takes wall time that the time
scale does not shrink, so it must not move the simulated clock:

- After idling, the clock restarts when the waking request *arrived* (`ARRIVED_S`, stamped
  by the server before it reads the body), not when the event loop next runs the driver.
- While the driver is due (its step has ended, or it is behind), requests that arrive are
  not parsed unless the engine's waiting queue leaves room in the next step
  (`defers_arrivals`, applied by `sim._pacing`): a burst of a thousand requests cannot hold
  the event loop for seconds of parsing, yet an engine short of requests is fed first.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from servekit.sim._metrics import ServerMetrics
from servekit.sim.engine import Engine, SimRequest, StepResult
from servekit.sim.faults import Faults
from servekit.sim.step_time import BatchShape

CRASH_LOG = (
    "ERROR [core.py] EngineCore encountered a fatal error.",
    "Traceback (most recent call last):",
    '  File "vllm/v1/engine/core.py", line 701, in run_engine_core',
    "    engine_core.run_busy_loop()",
    '  File "vllm/v1/engine/core.py", line 728, in run_busy_loop',
    "    self._process_engine_step()",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "ERROR [async_llm.py] AsyncLLM output_handler failed.",
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
    "trace (above) for the root cause.",
)


# Loop time at which the request being handled arrived; set by the server per request.
ARRIVED_S: ContextVar[float | None] = ContextVar("servekit_sim_arrived_s", default=None)


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one step gave one request: a chunk of tokens, or the engine's death."""

    tokens: int
    finished: bool
    crashed: bool = False


@dataclass(slots=True)
class Ticket:
    """A submitted request's mailbox and timing on the simulated clock."""

    id: str
    queue: asyncio.Queue[Delivery]
    arrived_sim_s: float
    last_sim_s: float | None = None
    corrupted: bool = False
    completed: bool = False  # the whole answer reached the client
    request: SimRequest | None = None  # the engine's view of it (its prefix-cache hit)


@dataclass(frozen=True, slots=True)
class _StepInFlight:
    wall_start_s: float
    sim_start_s: float
    duration_s: float


class _Wake:
    """The driver's wake-up call, stamped with the earliest arrival among its callers.

    A caller's arrival is `ARRIVED_S` in its context (the server stamps each request), else
    the loop time of the call. The simulated clock restarts at the stamp, not when the busy
    event loop next gets round to the driver.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.at_s: float | None = None

    def set(self) -> None:
        arrived = ARRIVED_S.get()
        stamp = asyncio.get_running_loop().time() if arrived is None else arrived
        self.at_s = stamp if self.at_s is None else min(self.at_s, stamp)
        self._event.set()

    def clear(self) -> None:
        self._event.clear()
        self.at_s = None

    async def wait(self) -> float:
        """Wait for the call; return when it was first given."""
        await self._event.wait()
        assert self.at_s is not None
        return self.at_s


def batch_size(batch: BatchShape) -> int:
    """Requests in a step's batch (decodes, verifications and prefill chunks)."""
    return len(batch.decode_contexts) + len(batch.verify_contexts) + len(batch.prefill_chunks)


class LiveEngine:
    """Runs a simulated engine in real time (scaled) for a live server.

    Two clocks: the wall clock, on which each step ends at a deadline (the previous
    deadline plus the step's duration x time scale, so timer lateness never accumulates),
    and the simulated clock (the sum of step durations), on which latency metrics are
    observed.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        time_scale: float,
        faults: Faults,
        metrics: ServerMetrics,
        log: Callable[[str], None],
    ) -> None:
        self.engine = engine
        self.time_scale = time_scale
        self.faults = faults
        self.metrics = metrics
        self.log = log
        self.crashed = False
        self.sim_s = 0.0  # simulated seconds of all steps run so far
        self._step: _StepInFlight | None = None
        self._tickets: dict[str, Ticket] = {}
        self._wake = _Wake()
        self._due_at_s = math.inf  # loop time the driver next wants to run at
        self.last_step_end_s: float | None = None  # loop time the last step ended at
        self._ran = asyncio.Event()  # set (and replaced) whenever the driver yields

    def sim_now_s(self) -> float:
        """The simulated time now: the engine's clock, interpolated inside a running step."""
        step = self._step
        if step is None:
            return self.sim_s
        elapsed_s = (asyncio.get_running_loop().time() - step.wall_start_s) / self.time_scale
        return step.sim_start_s + min(max(elapsed_s, 0.0), step.duration_s)

    def submit(
        self,
        rid: str,
        prompt_tokens: int,
        max_tokens: int,
        temperature: float,
        *,
        token_ids: Sequence[int] | None = None,
        output_ids: Iterator[int] | None = None,
    ) -> Ticket:
        """Queue a request in the engine and return its mailbox.

        `token_ids` (the prompt's) and `output_ids` (the answer's, in order) let the
        engine's prefix cache find and store the request's blocks.

        Raises:
            SimulationError: the request does not fit in max_model_len.
        """
        request = SimRequest(
            rid, prompt_tokens, max_tokens, temperature, token_ids=token_ids, output_ids=output_ids
        )
        self.engine.add(request)
        ticket = Ticket(rid, asyncio.Queue(), self.sim_now_s(), request=request)
        self._tickets[rid] = ticket
        self._wake.set()
        return ticket

    def release(self, rid: str) -> None:
        """Forget a request's mailbox (its client is done or gone) and abort it if unfinished.

        Like vLLM, a request whose client disconnected stops using the engine.
        """
        self._tickets.pop(rid, None)
        self.engine.abort(rid)

    def defers_arrivals(self) -> bool:
        """True while a newly arrived request should wait before being parsed: the driver is
        due (its step ended, it is behind, or a submission woke it from idle) and has not
        run yet, and the requests already waiting fill the next step.

        Otherwise the next step may need the arrival, so its parsing goes ahead.
        """
        if self.crashed or not self._next_step_filled():
            return False
        due_at_s = self._due_at_s
        if due_at_s == math.inf and self._wake.at_s is not None:
            due_at_s = self._wake.at_s  # woken from idle
        return asyncio.get_running_loop().time() >= due_at_s

    def _next_step_filled(self) -> bool:
        """Whether a request arriving now could not join the next step: running and waiting
        requests reach max_num_seqs, or the waiting ones alone hold its token budget."""
        engine = self.engine
        limits = engine.limits
        if len(engine.running) + len(engine.waiting) >= limits.max_num_seqs:
            return True
        queued = 0
        for request in engine.waiting:
            queued += request.prefill_target - request.computed
            if queued >= limits.max_num_batched_tokens:
                return True
        return False

    async def wait_to_parse(self) -> None:
        """Return once a newly arrived request may be parsed (see `defers_arrivals`)."""
        while self.defers_arrivals():
            await self._ran.wait()

    def _yielding(self) -> None:
        """Wake the requests waiting to be parsed: the driver is about to let them run."""
        self._ran.set()
        self._ran = asyncio.Event()

    async def run(self) -> None:
        """Drive the engine until it crashes or the task is cancelled."""
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while not self.crashed:
            if self.engine.idle:
                self._wake.clear()
                self._due_at_s = math.inf
                self._yielding()
                # The only reset: after idling, time starts afresh at the arrival, though
                # never before the last step's end (a request that arrived while the
                # engine was busy was not in it).
                deadline = max(deadline, await self._wake.wait())
                continue
            result = self.engine.step()
            if self._inject_faults(result):
                return
            if not result.batch.empty:
                self._step = _StepInFlight(deadline, self.sim_s, result.duration_s)
                deadline += result.duration_s * self.time_scale
                self._due_at_s = deadline
                delay_s = deadline - loop.time()
                if delay_s > 0:  # on time: requests held back may be parsed until then
                    self._yielding()
                await asyncio.sleep(max(0.0, delay_s))
                self.sim_s += result.duration_s
                self._step = None
                self.last_step_end_s = deadline
            # Even a step that computed nothing (a zero-token prompt) may have sampled.
            self._deliver(result)
            if result.batch.empty:
                pause_s = 0.0 if result.gained else 0.001
                self._due_at_s = loop.time() + pause_s
                self._yielding()
                await asyncio.sleep(pause_s)
                deadline = max(deadline, loop.time())

    def _inject_faults(self, result: StepResult) -> bool:
        """Apply the crash and corruption faults to a step; True if the engine died."""
        size = batch_size(result.batch)
        crash_at = self.faults.crash_at_concurrency
        if crash_at is not None and size >= crash_at:
            self._crash()
            return True
        corrupt_at = self.faults.corrupt_at_concurrency
        if corrupt_at is not None and size >= corrupt_at:
            batched = {rid for rid, _ in result.gained} | {r.id for r in self.engine.running}
            for rid in batched:
                if rid in self._tickets:
                    self._tickets[rid].corrupted = True
        return False

    def _deliver(self, result: StepResult) -> None:
        now = self.sim_s
        finished = set(result.finished)
        for rid, tokens in result.gained:
            ticket = self._tickets.get(rid)
            if ticket is None:
                continue
            if ticket.last_sim_s is None:
                self.metrics.observe_first_token(now - ticket.arrived_sim_s)
            else:
                self.metrics.observe_inter_token(now - ticket.last_sim_s)
            ticket.last_sim_s = now
            ticket.queue.put_nowait(Delivery(tokens, rid in finished))

    def _crash(self) -> None:
        self.crashed = True
        self._yielding()
        for line in CRASH_LOG:
            self.log(line)
        for ticket in self._tickets.values():
            ticket.queue.put_nowait(Delivery(0, finished=True, crashed=True))
