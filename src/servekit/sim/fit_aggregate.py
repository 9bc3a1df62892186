"""Fit step coefficients to aggregate measured points by bounded least squares (core).

An aggregate point is what a load-test table reports: output throughput and mean latency at
one closed-loop concurrency. Each point is simulated offline (`run_point`) with the
candidate coefficients; the residuals are the relative errors of simulated throughput and
latency. `scipy.optimize.least_squares` moves the free coefficients inside their plausible
ranges (`servekit.specs.step_coefficients`, and [0, 1] for acceptance probabilities),
working in each range's unit interval so one finite-difference step suits them all.

A table of a few points determines only a few coefficients. After each fit,
`servekit.sim.identify.estimates` classifies the free coefficients from the Jacobian; the
least determined one goes back to its given value and the rest are refitted, until every
coefficient still free is determined (one at a time, because two correlated coefficients
both look undetermined while either alone may be pinned down). Coefficients never freed
keep the caller's values, and the caller states why (docs/simulator.md section 3 does for
the M3 profiles).

The objective is deterministic: every evaluation simulates with the same seeds. In a closed
loop the batch of every step depends only on token counts, never on step durations, so the
residuals are smooth in the step coefficients; acceptance probabilities change which drafts
are accepted and make them piecewise constant, hence the finite-difference step of
`DIFF_STEP` of a range (a few hundred accept-or-reject draws change across it).

Besides the table, a deployment states figures as ranges ("EAGLE3 cuts latency by 20-49%",
"throughput is higher without it"). A `Statement` is such a figure: a simulated quantity
that must lie in [low, high]. Its residual is the distance outside the range (zero inside),
a one-sided term: it pulls only when the candidate violates it. Only a statement the solution
still violates counts as a measured figure when `identify` judges what the data determines:
one satisfied at the edge of its range bounds a coefficient without determining it (the
Jacobian would treat the edge as an equality and call the coefficient determined, though
every value on the allowed side fits the points as well).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from servekit.analyze.summarize import point_metrics
from servekit.errors import SimulationError
from servekit.sim.engine import Engine
from servekit.sim.identify import CoefficientEstimate, estimates
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.specs import step_coefficients

# Finite-difference step, as a fraction of each coefficient's plausible range.
DIFF_STEP = 0.01
# Plausible range of a draft position's conditional acceptance probability.
ACCEPTANCE_RANGE = (0.0, 1.0)

EngineFactory = Callable[[StepTimeParams, AcceptanceParams | None], Engine]
Vector = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class MeasuredPoint:
    """One measured load point to fit (aggregate figures: throughput and mean latency)."""

    concurrency: int
    input_len: int
    output_len: int
    temperature: float
    throughput_tok_s: float
    latency_s: float
    requests: int = 64


@dataclass(frozen=True, slots=True)
class PointFit:
    """Simulated against measured for one point."""

    point: MeasuredPoint
    throughput_tok_s: float
    latency_s: float

    @property
    def throughput_error(self) -> float:
        """Relative throughput error (simulated / measured - 1)."""
        return self.throughput_tok_s / self.point.throughput_tok_s - 1

    @property
    def latency_error(self) -> float:
        """Relative latency error (simulated / measured - 1)."""
        return self.latency_s / self.point.latency_s - 1


@dataclass(frozen=True, slots=True)
class Coefficients:
    """Step-time coefficients and acceptance probabilities (None without speculation)."""

    step: StepTimeParams
    acceptance: AcceptanceParams | None = None


@dataclass(frozen=True, slots=True)
class Statement:
    """A stated figure as a range: `value(coefficients)` must lie in [low, high].

    Attributes:
        name: the figure in words (reported with its residual).
        value: simulates the quantity with the candidate coefficients.
        low: the least value the figure allows (None: unbounded below).
        high: the greatest value it allows (None: unbounded above).
    """

    name: str
    value: Callable[[Coefficients], float]
    low: float | None = None
    high: float | None = None

    def residual(self, value: float) -> float:
        """How far `value` lies outside [low, high]; zero inside."""
        if self.low is not None and value < self.low:
            return self.low - value
        if self.high is not None and value > self.high:
            return value - self.high
        return 0.0


@dataclass(frozen=True, slots=True)
class StatementFit:
    """A statement's simulated value and residual at the fitted coefficients."""

    statement: Statement
    value: float
    residual: float


@dataclass(frozen=True, slots=True)
class AggregateFit:
    """The outcome of a fit to aggregate points.

    Attributes:
        coefficients: the fitted coefficients (undetermined and fixed ones at their start).
        estimates: each coefficient asked to be free, in that order, as the last round it
            was free in classified it (undetermined ones at their start value).
        fixed: coefficients never freed (kept at the caller's values).
        points: simulated against measured for every fitted point.
        statements: each fitted statement's value and residual at the solution.
        evaluations: simulations of the whole point set the fit ran.
    """

    coefficients: Coefficients
    estimates: tuple[CoefficientEstimate, ...]
    fixed: tuple[str, ...]
    points: tuple[PointFit, ...]
    statements: tuple[StatementFit, ...]
    evaluations: int


def acceptance_name(temperature: float, position: int) -> str:
    """The coefficient name of draft position `position` (1-based) at a temperature."""
    return f"acceptance_{temperature:g}_p{position}"


def _ranges(coefficients: Coefficients) -> dict[str, tuple[float, float]]:
    ranges = dict(step_coefficients())
    if coefficients.acceptance is not None:
        for temperature, probs in coefficients.acceptance.points:
            for i in range(len(probs)):
                ranges[acceptance_name(temperature, i + 1)] = ACCEPTANCE_RANGE
    return ranges


def _values(coefficients: Coefficients, names: Sequence[str]) -> Vector:
    values: dict[str, float] = {
        n: float(getattr(coefficients.step, n)) for n in step_coefficients()
    }
    if coefficients.acceptance is not None:
        for temperature, probs in coefficients.acceptance.points:
            for i, p in enumerate(probs):
                values[acceptance_name(temperature, i + 1)] = p
    return np.array([values[n] for n in names], dtype=np.float64)


def with_values(coefficients: Coefficients, names: Sequence[str], values: Vector) -> Coefficients:
    """The coefficients with `names` set to `values` (step fields or acceptance positions)."""
    given = dict(zip(names, (float(v) for v in values), strict=True))
    step_fields = {n: given[n] for n in step_coefficients() if n in given}
    step = replace(coefficients.step, **step_fields)
    accept = coefficients.acceptance
    if accept is not None:
        accept = AcceptanceParams(
            tuple(
                (t, tuple(given.get(acceptance_name(t, i + 1), p) for i, p in enumerate(probs)))
                for t, probs in accept.points
            )
        )
    return Coefficients(step, accept)


def simulate(
    new_engine: EngineFactory,
    coefficients: Coefficients,
    points: Sequence[MeasuredPoint],
    *,
    seed: int,
) -> tuple[PointFit, ...]:
    """Simulate each point (closed loop) with the coefficients; the same seed every time."""
    fits = []
    for point in points:
        load = LoadPoint(
            f"c={point.concurrency}",
            max(point.requests, 2 * point.concurrency),
            point.input_len,
            point.output_len,
            point.temperature,
            concurrency=point.concurrency,
        )
        engine = new_engine(coefficients.step, coefficients.acceptance)
        m = point_metrics(run_point(engine, load, random.Random(seed)).records, ci=False)
        if m.latency_s.mean is None:
            raise SimulationError(
                f"simulated point c={point.concurrency} completed no request",
                fix="check the profile's limits admit the point's input and output lengths",
            )
        fits.append(PointFit(point, m.output_throughput_tok_s, m.latency_s.mean))
    return tuple(fits)


def residuals(fits: Sequence[PointFit]) -> Vector:
    """Relative throughput and latency errors, two per point."""
    return np.array(
        [e for f in fits for e in (f.throughput_error, f.latency_error)], dtype=np.float64
    )


def _looseness(estimate: CoefficientEstimate, span: tuple[float, float]) -> float:
    """Standard error as a fraction of the plausible range (infinite when untouched)."""
    if estimate.stderr is None:
        return float("inf")
    return estimate.stderr / (span[1] - span[0])


def fit_aggregate(
    points: Sequence[MeasuredPoint],
    *,
    new_engine: EngineFactory,
    start: Coefficients,
    free: Sequence[str],
    statements: Sequence[Statement] = (),
    seed: int = 0,
) -> AggregateFit:
    """Fit the `free` coefficients to the points and statements; the rest keep `start`.

    Rounds of bounded least squares: after each, if some coefficients are not determined by
    the points (`servekit.sim.identify.estimates`), the least determined one (largest
    standard error against its range) returns to its start value and the others are
    refitted, until every coefficient still free is determined.

    Args:
        points: the measured closed-loop points.
        new_engine: builds a fresh engine with the given coefficients.
        start: starting values of the free coefficients and values of all the others.
        free: coefficients to fit (StepTimeParams fields, `acceptance_name(...)` positions).
        statements: stated ranges fitted as one-sided residuals beside the points.
        seed: seeds every simulation (engine and load point alike).

    Raises:
        SimulationError: a free name is not a coefficient, or there are not fewer free
            coefficients than residuals (two per point).
    """
    ranges = _ranges(start)
    unknown = [n for n in free if n not in ranges]
    if unknown:
        raise SimulationError(
            f"cannot fit {', '.join(unknown)}: not a coefficient of this model",
            fix=f"free some of {', '.join(ranges)}",
        )
    figures = 2 * len(points) + len(statements)
    if len(free) >= figures:
        raise SimulationError(
            f"{len(free)} free coefficients for {figures} measured figures",
            fix="free fewer coefficients than twice the points, or measure more points",
        )
    evaluations = 0

    def run(coefficients: Coefficients) -> tuple[PointFit, ...]:
        nonlocal evaluations
        evaluations += 1
        return simulate(new_engine, coefficients, points, seed=seed)

    def all_residuals(coefficients: Coefficients) -> Vector:
        said = [s.residual(s.value(coefficients)) for s in statements]
        return np.concatenate([residuals(run(coefficients)), np.array(said, dtype=np.float64)])

    current = start
    names = list(free)
    reported: dict[str, CoefficientEstimate] = {}
    while names:
        lo = np.array([ranges[n][0] for n in names])
        span = np.array([ranges[n][1] for n in names]) - lo
        x0 = np.clip((_values(start, names) - lo) / span, 0.0, 1.0)

        def unit_residuals(u: Vector, names: list[str] = names, lo: Vector = lo,
                           span: Vector = span) -> Vector:  # fmt: skip
            return all_residuals(with_values(start, names, lo + span * u))

        solved = least_squares(unit_residuals, x0, bounds=(0.0, 1.0), diff_step=DIFF_STEP)
        jac = solved.jac / span  # d residual / d coefficient
        # A statement the solution satisfies measures nothing: inside its range it is silent,
        # and at its edge it only bounds the coefficients (any value on the allowed side
        # fits as well), so only a violated statement counts as a figure.
        used = [i < 2 * len(points) or solved.fun[i] != 0.0 for i in range(len(solved.fun))]
        found = estimates(
            names,
            lo + span * solved.x,
            _values(start, names),
            jac[used],
            solved.fun[used],
            [ranges[n] for n in names],
        )
        reported.update((e.name, e) for e in found)
        current = with_values(start, names, np.array([e.value for e in found]))
        undetermined = [e for e in found if not e.determined]
        if not undetermined:
            break
        # Correlated coefficients each look undetermined; fixing the least determined one
        # often lets the data pin down the rest.
        worst = max(undetermined, key=lambda e: _looseness(e, ranges[e.name]))
        names = [n for n in names if n != worst.name]
    fixed = tuple(n for n in ranges if n not in free)
    said = []
    for statement in statements:
        value = statement.value(current)
        said.append(StatementFit(statement, value, statement.residual(value)))
    return AggregateFit(current, tuple(reported[n] for n in free), fixed, run(current),
                        tuple(said), evaluations)  # fmt: skip
