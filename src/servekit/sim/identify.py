"""Which fitted coefficients the data determines (core): standard errors from the Jacobian.

A least-squares fit returns a value for every free coefficient, but a coefficient the data
never exercises (a verify cost without speculative steps, a compute efficiency when every
step is memory-bound) gets an arbitrary value. After the fit, the Jacobian J of the
residuals at the solution gives the covariance s^2 (J^T J)^+ (s^2: the residual variance);
a coefficient whose standard error is large against its plausible range, or whose column of
J is zero, is reported as undetermined and its starting value is kept, with the reason; callers then
refit with the undetermined coefficients fixed at those values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# A coefficient is determined when its standard error is under this fraction of its
# plausible range: below it, the data pins the value to a tenth of what physics allows.
DETERMINED_REL_STDERR = 0.1


@dataclass(frozen=True, slots=True)
class CoefficientEstimate:
    """One coefficient after a fit.

    Attributes:
        name: the coefficient (a StepTimeParams field or an acceptance position).
        value: the fitted value, or the kept starting value when undetermined.
        determined: whether the data pins it down (see DETERMINED_REL_STDERR).
        stderr: standard error from the Jacobian, None when the data does not touch it.
        note: why it is undetermined ("" when determined).
    """

    name: str
    value: float
    determined: bool
    stderr: float | None
    note: str = ""


def estimates(
    names: Sequence[str],
    fitted: npt.NDArray[np.float64],
    start: npt.NDArray[np.float64],
    jacobian: npt.NDArray[np.float64],
    residuals: npt.NDArray[np.float64],
    ranges: Sequence[tuple[float, float]],
) -> list[CoefficientEstimate]:
    """Classify each fitted coefficient as determined or not and give its standard error.

    Args:
        names: the coefficients, in the order of the Jacobian's columns.
        fitted: the solution.
        start: the starting values (kept for undetermined coefficients).
        jacobian: d residual / d coefficient at the solution, shape (residuals, coefficients).
        residuals: the residuals at the solution.
        ranges: each coefficient's plausible (low, high).
    """
    m, n = jacobian.shape
    dof = max(m - n, 1)
    s2 = float(residuals @ residuals) / dof
    cov = np.linalg.pinv(jacobian.T @ jacobian) * s2
    out = []
    for i, name in enumerate(names):
        lo, hi = ranges[i]
        column = float(np.abs(jacobian[:, i]).max()) if m else 0.0
        if column == 0.0:
            out.append(CoefficientEstimate(name, float(start[i]), False, None,
                                           "no measured quantity depends on it"))  # fmt: skip
            continue
        stderr = float(np.sqrt(max(cov[i, i], 0.0)))
        if stderr > DETERMINED_REL_STDERR * (hi - lo):
            out.append(CoefficientEstimate(
                name, float(start[i]), False, stderr,
                f"standard error {stderr:.3g} exceeds {DETERMINED_REL_STDERR:.0%} of its "
                f"plausible range {lo:g}-{hi:g}",
            ))  # fmt: skip
            continue
        out.append(CoefficientEstimate(name, float(fitted[i]), True, stderr))
    return out
