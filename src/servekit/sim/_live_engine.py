"""The simulated engine on the wall clock (shell): one driver task, one queue per request.

The driver runs the pure engine one step at a time, sleeps each step's duration times the
time scale, then hands every request the tokens it gained in that step as one delivery
(one streamed chunk). Requests submitted meanwhile join the next step; when the engine is
idle the driver waits for the next submission. The crash and corruption faults act here,
where the batch of each step is known.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from servekit.sim._metrics import ServerMetrics
from servekit.sim.engine import Engine, SimRequest
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
    """A submitted request's mailbox and timing."""

    id: str
    queue: asyncio.Queue[Delivery]
    arrived_s: float
    last_s: float | None = None
    corrupted: bool = False


def batch_size(batch: BatchShape) -> int:
    """Requests in a step's batch (decodes, verifications and prefill chunks)."""
    return len(batch.decode_contexts) + len(batch.verify_contexts) + len(batch.prefill_chunks)


class LiveEngine:
    """Runs a simulated engine in real time (scaled) for a live server."""

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
        self._tickets: dict[str, Ticket] = {}
        self._wake = asyncio.Event()

    def submit(self, rid: str, prompt_tokens: int, max_tokens: int, temperature: float) -> Ticket:
        """Queue a request in the engine and return its mailbox.

        Raises:
            SimulationError: the request does not fit in max_model_len.
        """
        self.engine.add(SimRequest(rid, prompt_tokens, max_tokens, temperature))
        loop = asyncio.get_running_loop()
        ticket = Ticket(rid, asyncio.Queue(), loop.time())
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
                deadline = loop.time()
                continue
            result = self.engine.step()
            if result.batch.empty:  # nothing fits this step; let other tasks run
                await asyncio.sleep(0.001)
                continue
            size = batch_size(result.batch)
            crash_at = self.faults.crash_at_concurrency
            if crash_at is not None and size >= crash_at:
                self._crash()
                return
            corrupt_at = self.faults.corrupt_at_concurrency
            if corrupt_at is not None and size >= corrupt_at:
                batched = {rid for rid, _ in result.gained} | {r.id for r in self.engine.running}
                for rid in batched:
                    if rid in self._tickets:
                        self._tickets[rid].corrupted = True
            # A deadline, not a plain sleep, so event-loop overhead does not stretch the clock.
            deadline = max(deadline, loop.time()) + result.duration_s * self.time_scale
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            now = loop.time()
            finished = set(result.finished)
            for rid, tokens in result.gained:
                ticket = self._tickets.get(rid)
                if ticket is None:
                    continue
                if ticket.last_s is None:
                    self.metrics.observe_first_token((now - ticket.arrived_s) / self.time_scale)
                else:
                    self.metrics.observe_inter_token((now - ticket.last_s) / self.time_scale)
                ticket.last_s = now
                ticket.queue.put_nowait(Delivery(tokens, rid in finished))

    def _crash(self) -> None:
        self.crashed = True
        for line in CRASH_LOG:
            self.log(line)
        for ticket in self._tickets.values():
            ticket.queue.put_nowait(Delivery(0, finished=True, crashed=True))
