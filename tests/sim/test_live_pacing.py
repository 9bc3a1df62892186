"""The live driver's clock rules: it restarts at a request's arrival and yields to the engine."""

from __future__ import annotations

import asyncio
import contextvars

from servekit.profiles import load_profile
from servekit.sim._live_engine import ARRIVED_S, LiveEngine, Ticket
from servekit.sim._metrics import ServerMetrics
from servekit.sim.build import build_engine
from servekit.sim.faults import Faults

PROFILE = "minimax-m3-mxfp8-8xa800-no-eagle3"
SLOW = 1000.0  # a step lasts long enough on the wall clock to look at the driver mid-step


def _live() -> LiveEngine:
    engine = build_engine(load_profile(PROFILE), seed=0)
    return LiveEngine(
        engine,
        time_scale=SLOW,
        faults=Faults(),
        metrics=ServerMetrics(engine, "m"),
        log=lambda _line: None,
    )


def _submit_arrived_at(live: LiveEngine, rid: str, arrived_s: float) -> Ticket:
    """Submit as a request the server stamped as arriving at `arrived_s` (loop time)."""
    context = contextvars.copy_context()
    context.run(ARRIVED_S.set, arrived_s)
    return context.run(live.submit, rid, 1024, 4, 0.0)


def test_an_idle_engine_restarts_its_clock_at_the_arrival_not_the_submission() -> None:
    """The first step after idling starts at the waking request's arrival stamp, exactly."""

    async def body() -> None:
        live = _live()
        driver = asyncio.create_task(live.run())
        await asyncio.sleep(0.01)  # the driver waits for work
        arrived_s = asyncio.get_running_loop().time() - 0.005  # parsed for 5 ms
        _submit_arrived_at(live, "a", arrived_s)
        try:
            await asyncio.sleep(0.05)
            step = live._step
            assert step is not None
            assert step.wall_start_s == arrived_s
            assert step.sim_start_s == 0.0
        finally:
            driver.cancel()

    asyncio.run(body())


def test_a_request_parsed_during_a_step_does_not_start_before_the_step_ended() -> None:
    """An arrival stamped while the engine was busy restarts the idle clock at the last
    step's end, never earlier."""

    async def body() -> None:
        live = _live()
        live.time_scale = 0.01
        loop = asyncio.get_running_loop()
        driver = asyncio.create_task(live.run())
        try:
            first = _submit_arrived_at(live, "a", loop.time())
            while not (await first.queue.get()).finished:
                pass
            ended_s = live.last_step_end_s  # the last step's end on the wall clock
            assert ended_s is not None
            await asyncio.sleep(0.01)  # the engine is idle now
            live.time_scale = SLOW
            _submit_arrived_at(live, "b", ended_s - 1.0)  # stamped while "a" still ran
            await asyncio.sleep(0.05)
            step = live._step
            assert step is not None
            assert step.wall_start_s == ended_s
        finally:
            driver.cancel()

    asyncio.run(body())


def test_arrivals_wait_only_while_the_driver_is_due_and_the_next_step_is_filled() -> None:
    """defers_arrivals: never for an idle engine; when due, only once the waiting requests
    hold the next step's token budget (4 prompts of 1024 tokens for a 4096 budget)."""

    async def body() -> None:
        live = _live()
        loop = asyncio.get_running_loop()
        assert not live.defers_arrivals()
        _submit_arrived_at(live, "r0", loop.time())  # wakes the idle driver: it is due
        assert not live.defers_arrivals()  # 1024 waiting tokens leave room in the step
        for index in range(1, 4):
            _submit_arrived_at(live, f"r{index}", loop.time())
        assert live.defers_arrivals()  # 4096 waiting tokens fill the budget
        live.crashed = True
        assert not live.defers_arrivals()

    asyncio.run(body())
