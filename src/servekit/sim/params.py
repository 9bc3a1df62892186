"""Simulator parameters (core): the step-time model's coefficients and spec-decode acceptance.

Every coefficient has a physical meaning (docs/simulator.md). `StepTimeParams` is defined once
in `servekit.specs`, because profiles carry calibrated values in their `simulator:` section
and are validated as that class; `servekit.sim.build.DEFAULT_STEP` gives roofline defaults
for a profile without one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from servekit.errors import SimulationError
from servekit.specs import StepTimeParams

__all__ = ["AcceptanceParams", "StepTimeParams"]


@dataclass(frozen=True, slots=True)
class AcceptanceParams:
    """Per-position conditional acceptance probabilities of draft tokens, by temperature.

    `points` holds (temperature, (p1, ..., pk)): p_i is the probability that draft token i
    is accepted given tokens 1..i-1 were. Between listed temperatures the probabilities
    are interpolated linearly; outside, the nearest is used.
    """

    points: tuple[tuple[float, tuple[float, ...]], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise SimulationError(
                "acceptance needs at least one temperature point",
                fix="add a temperature with its per-position probabilities",
            )
        widths = {len(probs) for _, probs in self.points}
        if len(widths) != 1:
            raise SimulationError(
                "every acceptance point needs the same number of positions",
                fix="give each temperature num_speculative_tokens probabilities",
            )
        for temperature, probs in self.points:
            if any(not 0 <= p <= 1 for p in probs):
                raise SimulationError(
                    f"acceptance probabilities at temperature {temperature} must be in [0, 1]",
                    fix="write each probability as a fraction, e.g. 0.8",
                )

    def probabilities(self, temperature: float) -> tuple[float, ...]:
        """Return the per-position probabilities at a temperature."""
        pts = sorted(self.points)
        if temperature <= pts[0][0]:
            return pts[0][1]
        if temperature >= pts[-1][0]:
            return pts[-1][1]
        for (t0, p0), (t1, p1) in itertools.pairwise(pts):
            if t0 <= temperature <= t1:
                w = (temperature - t0) / (t1 - t0)
                return tuple(a + (b - a) * w for a, b in zip(p0, p1, strict=True))
        return pts[-1][1]  # pragma: no cover - the loop always returns

    def mean_acceptance_length(self, temperature: float, k: int) -> float:
        """Expected tokens gained per verify step: 1 + sum of prefix products (k drafts)."""
        probs = self.probabilities(temperature)[:k]
        total, prefix = 1.0, 1.0
        for p in probs:
            prefix *= p
            total += prefix
        return total
