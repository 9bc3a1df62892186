"""`Turns`: one waiter per event-loop iteration, first come first served, and the selector
polled between any two (exact orderings, no timing)."""

from __future__ import annotations

import asyncio
import itertools
import socket

from servekit.bench.turns import Turns


class _Ticker:
    """Counts event-loop iterations: a callback that re-schedules itself once per iteration."""

    def __init__(self) -> None:
        self.ticks = 0
        self.running = True

    def tick(self) -> None:
        self.ticks += 1
        if self.running:
            asyncio.get_running_loop().call_soon(self.tick)


def test_one_waiter_per_iteration_in_arrival_order() -> None:
    async def main() -> list[tuple[int, int]]:
        ticker, turns, woke = _Ticker(), Turns(), []
        asyncio.get_running_loop().call_soon(ticker.tick)

        async def wait(name: int) -> None:
            await turns.turn()
            woke.append((name, ticker.ticks))

        await asyncio.gather(*(wait(n) for n in range(6)))
        ticker.running = False
        return woke

    woke = asyncio.run(main())
    assert [name for name, _ in woke] == list(range(6))
    ticks = [tick for _, tick in woke]
    assert all(b - a == 1 for a, b in itertools.pairwise(ticks)), ticks


def test_a_cancelled_waiter_gives_its_turn_to_the_next() -> None:
    async def main() -> list[str]:
        turns, woke = Turns(), []

        async def wait(name: str) -> None:
            await turns.turn()
            woke.append(name)

        tasks = [asyncio.create_task(wait(n)) for n in "abc"]
        await asyncio.sleep(0)  # all three wait
        tasks[1].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await wait("d")  # the queue drained and starts again
        return woke

    assert asyncio.run(main()) == ["a", "c", "d"]


def test_bytes_that_arrive_between_turns_are_read_before_the_next_turn() -> None:
    # A socket made readable after the first turn is handled before the third waiter runs:
    # the loop polls between turns, so an arrival waits for at most one turn's work.
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        turns, order = Turns(), []
        left, right = socket.socketpair()
        left.setblocking(False)

        def readable() -> None:
            left.recv(16)
            order.append("read")
            loop.remove_reader(left)

        async def wait(name: str) -> None:
            await turns.turn()
            order.append(name)
            if name == "first":
                right.send(b"x")  # arrives while the others still wait

        loop.add_reader(left, readable)
        try:
            await asyncio.gather(*(wait(n) for n in ("first", "second", "third", "fourth")))
        finally:
            left.close()
            right.close()
        return order

    order = asyncio.run(main())
    assert order.index("read") <= order.index("third"), order
