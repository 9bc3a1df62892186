"""The simulated engine on the wall clock (shell): one driver task, one queue per request.

The driver runs the pure engine one step at a time, sleeps until the step's end on the wall
clock (its duration times the time scale after the previous step's end), then hands every
request the tokens it gained in that step as one delivery (one streamed chunk). Requests
submitted meanwhile join the next step; when the engine is idle the driver waits for the
next submission. The crash and corruption faults act here, where the batch of each step is
known.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
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


@dataclass(frozen=True, slots=True)
class _StepInFlight:
    wall_start_s: float
    sim_start_s: float
    duration_s: float


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
        self._wake = asyncio.Event()

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
        self.engine.add(
            SimRequest(
                rid,
                prompt_tokens,
                max_tokens,
                temperature,
                token_ids=token_ids,
                output_ids=output_ids,
            )
        )
        ticket = Ticket(rid, asyncio.Queue(), self.sim_now_s())
        self._tickets[rid] = ticket
        self._wake.set()
        return ticket

    def release(self, rid: str) -> None:
        """Forget a request's mailbox (its client is done or gone) and abort it if unfinished.

        Like vLLM, a request whose client disconnected stops using the engine.
        """
        self._tickets.pop(rid, None)
        self.engine.abort(rid)

    async def run(self) -> None:
        """Drive the engine until it crashes or the task is cancelled."""
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while not self.crashed:
            if self.engine.idle:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()  # the only reset: after idling, time starts afresh
                continue
            result = self.engine.step()
            if self._inject_faults(result):
                return
            if not result.batch.empty:
                self._step = _StepInFlight(deadline, self.sim_s, result.duration_s)
                deadline += result.duration_s * self.time_scale
                await asyncio.sleep(max(0.0, deadline - loop.time()))
                self.sim_s += result.duration_s
                self._step = None
            # Even a step that computed nothing (a zero-token prompt) may have sampled.
            self._deliver(result)
            if result.batch.empty:
                await asyncio.sleep(0.0 if result.gained else 0.001)
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
        for line in CRASH_LOG:
            self.log(line)
        for ticket in self._tickets.values():
            ticket.queue.put_nowait(Delivery(0, finished=True, crashed=True))
