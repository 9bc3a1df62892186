"""Open-loop arrivals of the offline simulator come from servekit.workload.synthetic."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from servekit.sim.engine import Engine
from servekit.sim.offline import NS, LoadPoint, run_point
from servekit.workload.synthetic import gamma_arrivals, poisson_arrivals

Make = Callable[..., Engine]


def _scheduled(make_engine: Make, arrival: str, seed: int = 5) -> list[int]:
    point = LoadPoint("rate=4", 24, 64, 8, rate_rps=4.0, arrival=arrival)
    run = run_point(make_engine(), point, random.Random(seed))
    return sorted(r.scheduled_ns for r in run.records)


def test_constant_arrivals_are_evenly_spaced(make_engine: Make) -> None:
    """`constant` schedules request i at (i + 1) / rate seconds."""
    assert _scheduled(make_engine, "constant") == [int((i + 1) / 4.0 * NS) for i in range(24)]


@pytest.mark.parametrize(
    ("arrival", "offsets"),
    [
        ("poisson", lambda rng: poisson_arrivals(4.0, 24, rng)),
        ("gamma:0.5", lambda rng: gamma_arrivals(4.0, 0.5, 24, rng)),
    ],
)
def test_random_arrivals_follow_the_workload_process(
    make_engine: Make, arrival: str, offsets: Callable[[random.Random], list[float]]
) -> None:
    """Poisson and gamma points are scheduled at the workload module's offsets for the seed."""
    expected = [int(t * NS) for t in offsets(random.Random(5))]
    assert _scheduled(make_engine, arrival) == expected


def test_gamma_arrivals_differ_from_poisson(make_engine: Make) -> None:
    """The same seed gives a different schedule under gamma:0.5 than under poisson."""
    assert _scheduled(make_engine, "gamma:0.5") != _scheduled(make_engine, "poisson")
