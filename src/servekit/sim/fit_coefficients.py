"""Step-time coefficients fitted to reconstructed step durations (core): bounded least squares.

Each busy interval (servekit.sim.fit_steps) is one residual: its measured duration less the
sum of the model's step times for the steps it held, in milliseconds. The work of each step
comes from `step_work`, the same coefficient-free function the engine prices, so fit and
engine agree by construction. The model is linear in every coefficient but the two
efficiencies, which enter through max(t_memory, t_compute): the analytic Jacobian takes the
active branch of each step at the current coefficients, and scipy's trust-region solver
iterates with it inside each coefficient's plausible range.

Identifiability: a coefficient no step exercises (no verifying request: the verify and
draft coefficients; no compute-bound step: compute_efficiency) is fixed at the start value
before the fit. After each fit `servekit.sim.identify.estimates` gives standard errors; while
one is undetermined, the worst (largest standard error against its range) is fixed at its
start value and the rest refitted, so that of two collinear coefficients (the fixed step cost
and the weight-read time of a dense model differ only through the KV read) one is kept and
the other determined. Intervals whose residual exceeds 6 robust standard deviations (a
pause of the server or the client) are dropped once after the first fit and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from servekit.errors import SimulationError
from servekit.sim.fit_steps import StepInterval
from servekit.sim.identify import CoefficientEstimate, estimates
from servekit.sim.model import SimModel
from servekit.sim.params import StepTimeParams
from servekit.sim.step_time import StepWork, step_work
from servekit.specs import step_coefficients

NAMES: tuple[str, ...] = tuple(step_coefficients())
# The time from a request's send to the start of the step that serves it when the engine
# was idle: HTTP, tokenization and the hand-over to the engine process. It is fitted (it
# would otherwise be charged to the prefill coefficients) but the simulator has no such term.
ADMISSION = "admission_ms"
ADMISSION_RANGE = (0.0, 20.0)
# Residuals past this many robust standard deviations (1.4826 MAD) are pauses, not steps;
# but never residuals under RESOLUTION x the median interval: with noise-free data (the
# simulator's own) the MAD is the solver's tolerance, and no pause is that short.
OUTLIER_SIGMAS = 6.0
RESOLUTION = 1e-3


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured interval as the fit sees it: its duration and the work of its steps."""

    duration_ms: float
    works: tuple[StepWork, ...]
    after_idle: bool = False


@dataclass(frozen=True, slots=True)
class StepFit:
    """Fitted coefficients and how well they explain the step durations.

    Attributes:
        params: the coefficients (undetermined ones at their start values).
        estimates: every coefficient, determined or not, with its standard error.
        admission: the fitted admission time (ADMISSION), None without intervals after idle.
        observations: intervals fitted.
        outliers: intervals dropped as pauses.
        rms_ms: root-mean-square residual of the fitted intervals.
        mean_abs_rel: mean |residual| / measured duration.
    """

    params: StepTimeParams
    estimates: tuple[CoefficientEstimate, ...]
    admission: CoefficientEstimate | None
    observations: int
    outliers: int
    rms_ms: float
    mean_abs_rel: float

    def estimate(self, name: str) -> CoefficientEstimate:
        """The estimate of one coefficient by name (KeyError if none)."""
        for e in self.estimates:
            if e.name == name:
                return e
        raise KeyError(name)


def observations(intervals: Sequence[StepInterval], model: SimModel) -> list[Observation]:
    """Every interval with its steps' work (`with_idle`: also those that followed idle time)."""
    return [
        Observation(i.duration_s * 1e3, tuple(step_work(b, model) for b in i.batches), i.after_idle)
        for i in intervals
        if i.end_ns > i.start_ns
    ]


@dataclass(frozen=True, slots=True)
class _Design:
    """Per step: linear columns (ms per unit of each additive coefficient), bytes/s, FLOP/s."""

    linear: npt.NDArray[np.float64]  # (steps, 6): base, decode, verify, prefill, pass, request
    memory_ms: npt.NDArray[np.float64]  # t_memory x hbm_efficiency, ms
    compute_ms: npt.NDArray[np.float64]  # t_compute x compute_efficiency, ms
    owner: npt.NDArray[np.intp]  # observation of each step
    measured: npt.NDArray[np.float64]
    idle: npt.NDArray[np.float64]  # 1 for an interval after idle time


_LINEAR = ("base_ms", "decode_request_ms", "verify_request_ms", "prefill_request_ms",
           "draft_pass_ms", "draft_request_ms")  # fmt: skip


def _design(obs: Sequence[Observation]) -> _Design:
    rows, mem, comp, owner = [], [], [], []
    for index, o in enumerate(obs):
        for w in o.works:
            if w.empty:
                continue
            rows.append((1.0, w.decodes, w.verifies, w.prefills, w.draft_passes,
                         w.draft_passes * w.verifies))  # fmt: skip
            mem.append(1e3 * w.memory_bytes / w.hbm_bytes_s)
            comp.append(1e3 * w.flops / w.peak_flops)
            owner.append(index)
    return _Design(
        np.array(rows, dtype=np.float64).reshape(-1, len(_LINEAR)),
        np.array(mem, dtype=np.float64),
        np.array(comp, dtype=np.float64),
        np.array(owner, dtype=np.intp),
        np.array([o.duration_ms for o in obs], dtype=np.float64),
        np.array([float(o.after_idle) for o in obs], dtype=np.float64),
    )


def _values(params: StepTimeParams) -> dict[str, float]:
    return {n: float(getattr(params, n)) for n in NAMES}


def _predict(d: _Design, v: Mapping[str, float]) -> tuple[npt.NDArray[np.float64], ...]:
    """Predicted interval durations (ms), and per step the memory/compute terms and which wins."""
    coef = np.array([v[n] for n in _LINEAR])
    t_mem = d.memory_ms / v["hbm_efficiency"]
    t_comp = d.compute_ms / v["compute_efficiency"]
    per_step = d.linear @ coef + np.maximum(t_mem, t_comp)
    pred = np.bincount(d.owner, weights=per_step, minlength=len(d.measured)).astype(np.float64)
    return pred + v[ADMISSION] * d.idle, t_mem, t_comp


def _jacobian(d: _Design, v: Mapping[str, float], free: Sequence[str]) -> npt.NDArray[np.float64]:
    _, t_mem, t_comp = _predict(d, v)
    memory_bound = t_mem >= t_comp
    cols = []
    for name in free:
        if name == ADMISSION:
            cols.append(d.idle)
            continue
        if name in _LINEAR:
            per_step = d.linear[:, _LINEAR.index(name)]
        elif name == "hbm_efficiency":
            per_step = np.where(memory_bound, -t_mem / v[name], 0.0)
        else:
            per_step = np.where(memory_bound, 0.0, -t_comp / v[name])
        summed = np.bincount(d.owner, weights=per_step, minlength=len(d.measured))
        cols.append(summed.astype(np.float64))
    return np.stack(cols, axis=1) if cols else np.zeros((len(d.measured), 0))


def _unexercised(d: _Design, v: Mapping[str, float]) -> dict[str, str]:
    """Coefficients no step depends on at the start values, with the reason."""
    _, t_mem, t_comp = _predict(d, v)
    out = {}
    for name, reason in (
        ("decode_request_ms", "no step has a request decoding one token"),
        ("verify_request_ms", "no step verifies drafts (no speculative decoding)"),
        ("prefill_request_ms", "no measured step holds a prefill"),
        ("draft_pass_ms", "no step verifies drafts (no speculative decoding)"),
        ("draft_request_ms", "no step verifies drafts (no speculative decoding)"),
    ):
        if not d.linear[:, _LINEAR.index(name)].any():
            out[name] = reason
    if not (t_comp > t_mem).any() and not (d.compute_ms / 0.1 > d.memory_ms / 0.85).any():
        out["compute_efficiency"] = "no step is compute-bound anywhere in the plausible ranges"
    if not (t_mem >= t_comp).any():
        out["hbm_efficiency"] = "no step is memory-bound at the start values"
    if not d.idle.any():
        out[ADMISSION] = "no interval follows idle time"
    return out


def _solve(
    d: _Design, values: dict[str, float], free: list[str], keep: npt.NDArray[np.bool_]
) -> tuple[dict[str, float], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    bounds = _bounds()
    lo = np.array([bounds[n][0] for n in free])
    hi = np.array([bounds[n][1] for n in free])
    x0 = np.clip(np.array([values[n] for n in free]), lo, hi)

    def with_x(x: npt.NDArray[np.float64]) -> dict[str, float]:
        return {**values, **dict(zip(free, map(float, x), strict=True))}

    def fun(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return (_predict(d, with_x(x))[0] - d.measured)[keep]

    def jac(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return _jacobian(d, with_x(x), free)[keep]

    if not free:
        return values, fun(x0), np.zeros((int(keep.sum()), 0))
    result = least_squares(fun, x0, jac=jac, bounds=(lo, hi), x_scale="jac", method="trf")
    solved = with_x(result.x)
    return solved, fun(result.x), jac(result.x)


def _bounds() -> dict[str, tuple[float, float]]:
    return {**step_coefficients(), ADMISSION: ADMISSION_RANGE}


def fit_step_coefficients(obs: Sequence[Observation], start: StepTimeParams) -> StepFit:
    """Fit the step coefficients to measured intervals, starting from (and fixing at) `start`.

    Raises:
        SimulationError: no interval to fit.
    """
    if not obs:
        raise SimulationError(
            "no engine step to fit (no interval between two chunk arrivals)",
            fix="measure points with more than one output token per request",
        )
    d = _design(obs)
    start_values = {**_values(start), ADMISSION: 0.0}
    keep = np.ones(len(d.measured), dtype=bool)
    values, reported = _identify(d, start_values, keep)
    residuals = _predict(d, values)[0] - d.measured
    sigma = 1.4826 * float(np.median(np.abs(residuals - np.median(residuals))))
    limit = max(OUTLIER_SIGMAS * sigma, RESOLUTION * float(np.median(d.measured)))
    if (np.abs(residuals) > limit).any():
        keep = np.abs(residuals) <= limit
        values, reported = _identify(d, start_values, keep)
    bounds = _bounds()
    pred = _predict(d, values)[0][keep]
    measured = d.measured[keep]
    return StepFit(
        params=replace(start, **{n: values[n] for n in NAMES}),
        estimates=tuple(_at_bound(reported[n], bounds[n]) for n in NAMES),
        admission=_at_bound(reported[ADMISSION], bounds[ADMISSION]) if d.idle.any() else None,
        observations=int(keep.sum()),
        outliers=int((~keep).sum()),
        rms_ms=float(np.sqrt(np.mean((pred - measured) ** 2))),
        mean_abs_rel=float(np.mean(np.abs(pred - measured) / measured)),
    )


def _identify(
    d: _Design, start_values: dict[str, float], keep: npt.NDArray[np.bool_]
) -> tuple[dict[str, float], dict[str, CoefficientEstimate]]:
    """Fit, fixing undetermined coefficients one at a time; the values and every estimate."""
    bounds = _bounds()
    fixed = _unexercised(d, start_values)
    free = [n for n in (*NAMES, ADMISSION) if n not in fixed]
    reported: dict[str, CoefficientEstimate] = {}
    given: dict[str, str] = {}  # a determined coefficient -> the collinear one kept for it
    values, residuals, jacobian = _solve(d, dict(start_values), free, keep)
    while True:
        group = _admission_first(_null_group(jacobian, free))
        if group:
            name, values, residuals, jacobian = _fix_best(
                d, values, free, keep, group, start_values
            )
            others = [n for n in group if n != name]
            fixed[name] = (
                f"collinear with {', '.join(others)} in these data (no step tells them apart)"
                if others
                else "no measured step depends on it"
            )
            given.update(dict.fromkeys(others, name))
            continue
        found = estimates(
            free,
            np.array([values[n] for n in free]),
            np.array([start_values[n] for n in free]),
            jacobian,
            residuals,
            [bounds[n] for n in free],
        )
        bad = {e.name: e for e in found if not e.determined}
        if not bad:
            break
        worst = _admission_first(
            sorted(bad, key=lambda n: -np.inf if bad[n].stderr is None else -_rel(bad[n]))
        )
        partners = _correlated(jacobian, free)
        name, values, residuals, jacobian = _fix_best(d, values, free, keep, worst, start_values)
        reported[name] = bad[name]
        fixed[name] = bad[name].note
        given.update(dict.fromkeys(partners.get(name, ()), name))
    for e in found:
        note = f"determined with {given[e.name]} kept" if e.name in given else e.note
        reported[e.name] = replace(e, note=note)
    for name, note in fixed.items():
        values[name] = start_values[name]
        if name not in reported:
            reported[name] = CoefficientEstimate(name, start_values[name], False, None, note)
    return values, reported


# Singular values of the range-scaled Jacobian below this fraction of the largest are a null
# direction: exactly collinear columns, which no amount of data separates.
RANK_TOLERANCE = 1e-9


def _null_group(jacobian: npt.NDArray[np.float64], free: Sequence[str]) -> list[str]:
    """The coefficients on a null direction of the Jacobian (empty at full rank).

    The standard errors of `estimates` use a pseudo-inverse, which ignores an exact null
    direction (with noise-free data the residuals vanish too), so the rank is checked first.
    """
    if jacobian.shape[1] < 2:
        return []
    scaled = jacobian * np.array([_span(n) for n in free])
    _, singular, vt = np.linalg.svd(scaled, full_matrices=False)
    if singular[-1] > RANK_TOLERANCE * singular[0]:
        return []
    null = np.abs(vt[-1]) / np.abs(vt[-1]).max()
    return [free[i] for i in np.argsort(-null) if null[i] > 0.05]


def _fix_best(
    d: _Design,
    values: dict[str, float],
    free: list[str],
    keep: npt.NDArray[np.bool_],
    candidates: Sequence[str],
    start: Mapping[str, float],
) -> tuple[str, dict[str, float], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Fix the candidate whose refit explains the data best (the first on a tie); `free`
    loses it. Keeping one of a collinear group at its start can push the others to a bound;
    the refit cost tells which one can be kept without that."""
    best = None
    for name in candidates:
        rest = [n for n in free if n != name]
        trial = {**values, name: start[name]}
        solved, residuals, jacobian = _solve(d, trial, rest, keep)
        cost = float(residuals @ residuals)
        if best is None or cost < best[0] * (1 - 1e-9):
            best = (cost, name, solved, residuals, jacobian)
    assert best is not None  # candidates is never empty
    free.remove(best[1])
    return best[1], best[2], best[3], best[4]


# Coefficients whose estimates correlate beyond this are one combination the data pins down:
# fixing one leaves the other "determined" only given the kept value.
CORRELATED = 0.95


def _correlated(jacobian: npt.NDArray[np.float64], free: Sequence[str]) -> dict[str, list[str]]:
    """For each coefficient, the others whose estimates correlate with it past CORRELATED."""
    cov = np.linalg.pinv(jacobian.T @ jacobian)
    sd = np.sqrt(np.clip(np.diag(cov), 1e-300, None))
    corr = cov / np.outer(sd, sd)
    return {
        a: [b for j, b in enumerate(free) if j != i and abs(corr[i, j]) > CORRELATED]
        for i, a in enumerate(free)
    }


def _admission_first(names: list[str]) -> list[str]:
    """ADMISSION first among coefficients the data cannot tell apart: kept at 0, the time
    is charged to the step coefficients, which the simulator has (on a tie, _fix_best takes
    the first)."""
    return sorted(names, key=lambda n: n != ADMISSION)


def _rel(e: CoefficientEstimate) -> float:
    return (e.stderr or 0.0) / _span(e.name)


def _span(name: str) -> float:
    lo, hi = _bounds()[name]
    return hi - lo


def _at_bound(e: CoefficientEstimate, bound: tuple[float, float]) -> CoefficientEstimate:
    """A determined coefficient on an edge of its plausible range says so."""
    if e.determined and any(abs(e.value - edge) <= 1e-6 * (bound[1] - bound[0]) for edge in bound):
        return replace(e, note=f"at the edge of its plausible range {bound[0]:g}-{bound[1]:g}")
    return e
