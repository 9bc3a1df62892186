"""The reference deployment's reported figures (core): servekit's one copy of the seed table.

MiniMax-M3-MXFP8 with EAGLE3 on one node of 8x A800 (profile `minimax-m3-mxfp8-8xa800`),
input 1024 / output 128 tokens at temperature 0.7, as the deployment reported them in
its seed file (kept as `benchmarks/corpus/seed.json`); `tests/sim/test_calibration.py`
checks this copy against that file. The demo, the calibration tests and
`scripts/calibrate_sim.py` all read the figures from here.

The profile's simulator coefficients are fitted to part of the table only
(`FITTED_CONCURRENCY`); the other rows are predictions (docs/simulator.md section 3).
"""

from __future__ import annotations

from dataclasses import dataclass

REFERENCE_PROFILE = "minimax-m3-mxfp8-8xa800"


@dataclass(frozen=True, slots=True)
class ReferencePoint:
    """One row of the deployment's throughput table (EAGLE3 on)."""

    concurrency: int
    output_throughput_tok_s: float
    avg_latency_s: float


SEED_TABLE: tuple[ReferencePoint, ...] = (
    ReferencePoint(1, 83.0, 1.54),
    ReferencePoint(4, 209.8, 2.38),
    ReferencePoint(16, 400.0, 4.94),
    ReferencePoint(128, 924.3, 16.90),
)

# The rows the profile's simulator coefficients were fitted to (scripts/calibrate_sim.py);
# every other row of SEED_TABLE is held out, a prediction the fit never saw.
FITTED_CONCURRENCY: tuple[int, ...] = (1, 16)


def is_fitted(concurrency: int) -> bool:
    """Whether the calibration was fitted to the table's row at this concurrency."""
    return concurrency in FITTED_CONCURRENCY


# The calibration's stated errors (docs/simulator.md section 3), relative, for throughput and
# mean latency alike, at its own simulation (seed 11, 256 requests per point): the fit's
# error at the fitted rows (at most 1.9%), and at each held-out row the largest error over
# simulation seeds 1-11, rounded up to a whole percent (c=4: 9.8%, c=128: 21.1%).
FIT_BOUND = 0.02
HELD_OUT_BOUND: dict[int, float] = {4: 0.10, 128: 0.22}
