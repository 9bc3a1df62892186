"""Fit the step-time coefficients to measured load points (core).

A measured point is (concurrency, input/output length, temperature, output throughput,
mean latency). The fit searches the coefficients inside physically plausible bounds
(random search, then shrinking perturbations around the best) for the smallest sum of
squared relative errors of simulated throughput and latency, and reports the error per
point. Used by `servekit sim fit` and scripts/calibrate_sim.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from servekit.analyze.summarize import point_metrics
from servekit.errors import ConfigError
from servekit.results import DocumentError
from servekit.results.summary import load_summary
from servekit.sim.calibrate import FIGURES, Calibration
from servekit.sim.engine import Engine
from servekit.sim.identify import CoefficientEstimate
from servekit.sim.offline import LoadPoint, run_point
from servekit.specs import StepTimeParams, step_coefficients

# Plausible range of each coefficient (declared on StepTimeParams; docs/simulator.md).
BOUNDS: dict[str, tuple[float, float]] = step_coefficients()


@dataclass(frozen=True, slots=True)
class MeasuredPoint:
    """One measured load point to fit."""

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
class FitResult:
    """The best coefficients found and how well they fit."""

    params: StepTimeParams
    points: tuple[PointFit, ...]
    loss: float


def random_params(rng: random.Random) -> StepTimeParams:
    """Coefficients drawn uniformly inside BOUNDS."""
    return StepTimeParams(**{k: rng.uniform(lo, hi) for k, (lo, hi) in BOUNDS.items()})


def perturb_params(params: StepTimeParams, rng: random.Random, scale: float) -> StepTimeParams:
    """Coefficients moved by Gaussian steps of `scale` x each range, clamped to BOUNDS."""
    values = {}
    for key, (lo, hi) in BOUNDS.items():
        moved = getattr(params, key) + rng.gauss(0, scale * (hi - lo))
        values[key] = min(hi, max(lo, moved))
    return StepTimeParams(**values)


def simulate_points(
    new_engine: Callable[[StepTimeParams], Engine],
    params: StepTimeParams,
    points: Sequence[MeasuredPoint],
) -> tuple[PointFit, ...]:
    """Simulate every measured point with the given coefficients."""
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
        run = run_point(new_engine(params), load, random.Random(0))
        m = point_metrics(run.records, ci=False)
        fits.append(PointFit(point, m.output_throughput_tok_s, m.latency_s.mean or 0.0))
    return tuple(fits)


def fit_loss(fits: Sequence[PointFit]) -> float:
    """Sum of squared relative errors of throughput and latency."""
    return sum(f.throughput_error**2 + f.latency_error**2 for f in fits)


Candidate = TypeVar("Candidate")
Detail = TypeVar("Detail")


@dataclass(frozen=True, slots=True)
class Searched(Generic[Candidate, Detail]):
    """The best candidate a search found, its loss and what scoring it gave besides."""

    best: Candidate
    loss: float
    detail: Detail


def search(
    score: Callable[[Candidate], tuple[float, Detail]],
    *,
    draw: Callable[[random.Random], Candidate],
    perturb: Callable[[Candidate, random.Random, float], Candidate],
    iterations: int,
    rng: random.Random,
    start: Candidate | None = None,
    explore: bool = True,
    admissible: Callable[[Candidate], bool] | None = None,
    on_improve: Callable[[int | None, float], None] | None = None,
) -> Searched[Candidate, Detail] | None:
    """Random search, then shrinking perturbations around the best (lowest loss) candidate.

    The first quarter of the iterations draws candidates at random (when `explore`, and
    always while there is no best yet); the rest perturb the best by 5% of each range,
    1.5% in the last quarter.

    Args:
        score: loss of a candidate, plus whatever detail to keep for the best.
        draw: a random candidate.
        perturb: a candidate moved around another by `scale` x each range.
        iterations: candidates to draw or perturb.
        rng: the search's only source of randomness.
        start: a first candidate, scored before the search.
        explore: draw at random in the first quarter even when a start is given.
        admissible: candidates failing this are skipped without scoring.
        on_improve: called with the iteration (None for the start) and the loss of each new best.

    Returns:
        The best candidate, or None when no candidate was admissible.
    """
    best: Searched[Candidate, Detail] | None = None
    if start is not None:
        loss, detail = score(start)
        best = Searched(start, loss, detail)
        if on_improve is not None:
            on_improve(None, loss)
    for i in range(iterations):
        if best is None or (explore and i < iterations // 4):
            candidate = draw(rng)
        else:
            candidate = perturb(best.best, rng, 0.05 if i < iterations * 3 // 4 else 0.015)
        if admissible is not None and not admissible(candidate):
            continue
        loss, detail = score(candidate)
        if best is None or loss < best.loss:
            best = Searched(candidate, loss, detail)
            if on_improve is not None:
                on_improve(i, loss)
    return best


def fit_step_params(
    new_engine: Callable[[StepTimeParams], Engine],
    points: Sequence[MeasuredPoint],
    *,
    start: StepTimeParams,
    iterations: int = 200,
    seed: int = 0,
) -> FitResult:
    """Search coefficients that reproduce the measured points.

    Args:
        new_engine: builds a fresh engine with the given coefficients.
        points: the measured points.
        start: the first candidate (e.g. the profile's current coefficients).
        iterations: candidates to evaluate (a quarter random, the rest local).
        seed: seeds the search.
    """

    def score(params: StepTimeParams) -> tuple[float, tuple[PointFit, ...]]:
        fits = simulate_points(new_engine, params, points)
        return fit_loss(fits), fits

    found = search(
        score,
        draw=random_params,
        perturb=perturb_params,
        iterations=iterations,
        rng=random.Random(seed),
        start=start,
    )
    assert found is not None  # the start is always admissible
    return FitResult(found.best, found.detail, found.loss)


def measured_points(summary: object, *, where: str) -> list[MeasuredPoint]:
    """Closed-loop points of a parsed summary.json document, ready to fit.

    Raises:
        ConfigError: the document is not a servekit summary with fixed input/output lengths.
    """
    try:
        doc = load_summary(summary, where=where)
    except DocumentError as exc:
        raise ConfigError(exc.message, fix=exc.fix) from None
    workload = doc.workload
    if workload.input_len <= 0 or workload.output_len <= 0:
        raise ConfigError(
            f"{where}: not a servekit summary.json of fixed lengths (workload input_len "
            f"{workload.input_len}, output_len {workload.output_len})",
            fix="pass run directories written by servekit bench or servekit sim run",
        )
    out = []
    for p in doc.points:
        if p.concurrency is None or p.latency_s.mean is None or p.completed == 0:
            continue
        out.append(
            MeasuredPoint(
                concurrency=p.concurrency,
                input_len=workload.input_len,
                output_len=workload.output_len,
                temperature=workload.temperature,
                throughput_tok_s=p.output_throughput_tok_s,
                latency_s=p.latency_s.mean,
                requests=min(p.completed, 128),
            )
        )
    return out


def fit_rows(result: FitResult) -> list[dict[str, float | int]]:
    """Per-point measured-versus-simulated rows, rounded, for JSON and tables."""
    return [
        {
            "concurrency": f.point.concurrency,
            "measured_tok_s": f.point.throughput_tok_s,
            "simulated_tok_s": round(f.throughput_tok_s, 2),
            "throughput_error": round(f.throughput_error, 4),
            "measured_latency_s": f.point.latency_s,
            "simulated_latency_s": round(f.latency_s, 4),
            "latency_error": round(f.latency_error, 4),
        }
        for f in result.points
    ]


def fitted_profile(
    base_name: str, new_name: str, base_simulator: dict[str, object], result: FitResult, source: str
) -> dict[str, object]:
    """A profile document that extends `base_name` with the fitted step coefficients."""
    step = {k: round(getattr(result.params, k), 5) for k in result.params.__slots__}
    return {
        "extends": base_name,
        "name": new_name,
        "simulator": {**base_simulator, "step": step, "sources": [source]},
    }


# --- calibration from per-step data (servekit.sim.calibrate) --------------------------------


def _estimate_json(e: CoefficientEstimate) -> dict[str, Any]:
    stderr = None if e.stderr is None else float(f"{e.stderr:.3g}")
    return {"name": e.name, "value": round(e.value, 6), "determined": e.determined,
            "stderr": stderr, "note": e.note}  # fmt: skip


def calibration_json(cal: Calibration) -> dict[str, Any]:
    """The calibration as a JSON document: points (fit and held out), coefficients, diagnostics."""
    points = []
    for c in cal.checks:
        points.append({
            "label": c.point.label,
            "source": c.point.source,
            "held_out": c.held_out,
            "concurrency": c.point.concurrency,
            "rate_rps": c.point.rate_rps,
            "requests": sum(1 for r in c.point.records if r.ok),
            "measured": {n: round(getattr(c.measured, n), 5) for n in FIGURES},
            "predicted": {n: round(getattr(c.predicted, n), 5) for n in FIGURES},
            "error": {n: round(c.error(n), 4) for n in FIGURES},
        })  # fmt: skip
    s = cal.steps
    accept = cal.acceptance
    return {
        "points": points,
        "coefficients": [_estimate_json(e) for e in s.estimates],
        "admission": None if s.admission is None else _estimate_json(s.admission),
        "acceptance": None if accept is None else {
            "temperature": accept.temperature,
            "probabilities": [round(p, 4) for p in accept.probabilities],
            "stderr": [None if e is None else round(e, 4) for e in accept.stderr],
            "verifies": accept.verifies,
            "source": accept.source,
            "from_chunks": [round(p, 4) for p in accept.from_chunks],
        },
        "step_fit": {"intervals": s.observations, "outliers": s.outliers,
                     "rms_ms": round(s.rms_ms, 4), "mean_abs_rel": round(s.mean_abs_rel, 4)},
        "reconstruction": [
            {"label": label, "steps": r.steps, "intervals": len(r.intervals),
             "after_idle": sum(1 for i in r.intervals if i.after_idle),
             "unseen_prefill_steps": sum(i.unseen_prefill_steps for i in r.intervals),
             "coalesced_chunks": r.coalesced_chunks, "gap_ns": r.gap_ns}
            for label, r in cal.reconstructions
        ],
        "running": [
            {"label": label, "server_mean": round(server, 3), "reconstructed_mean": round(mine, 3)}
            for label, server, mine in cal.running
        ],
        "seed": cal.seed,
    }  # fmt: skip


def calibrated_profile(
    base_name: str, new_name: str, base_simulator: dict[str, object], cal: Calibration, source: str
) -> dict[str, object]:
    """A profile document that extends `base_name` with the calibrated simulator section.

    The acceptance, when fitted, is the measured temperature's alone (it stands for all).
    """
    params = cal.steps.params
    step = {k: round(getattr(params, k), 6) for k in params.__slots__}
    simulator: dict[str, object] = {**base_simulator, "step": step, "sources": [source]}
    if cal.acceptance is not None:
        a = cal.acceptance
        simulator["acceptance"] = {a.temperature: [round(p, 4) for p in a.probabilities]}
    return {"extends": base_name, "name": new_name, "simulator": simulator}
