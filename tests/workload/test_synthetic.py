"""Arrival processes (workload.synthetic): an infinite rate means every request at once."""

from __future__ import annotations

import math
import random

import pytest

from servekit.workload.synthetic import arrival_offsets


@pytest.mark.parametrize("arrival", ["poisson", "constant", "gamma:0.5"])
def test_an_infinite_rate_sends_every_request_at_offset_zero(arrival: str) -> None:
    """`--rate inf` under any arrival process: no pacing, every offset 0 (gamma used to
    raise on its zero scale, constant to divide by infinity)."""
    assert arrival_offsets(arrival, math.inf, 5, random.Random(0)) == [0.0] * 5


def test_a_finite_rate_still_paces() -> None:
    """A finite rate keeps its gaps: constant 2 req/s is one request every 0.5 s."""
    assert arrival_offsets("constant", 2.0, 3, random.Random(0)) == [0.5, 1.0, 1.5]
