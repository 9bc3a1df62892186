"""`sim fit` results as documents (core), and the random search scripts/calibrate_sim.py uses.

`calibration_json` and `calibrated_profile` turn a `servekit.sim.calibrate.Calibration`
into what `servekit sim fit` prints with --json and writes with -o. `search` is a generic
random search (random draws, then shrinking perturbations around the best) that
scripts/calibrate_sim.py runs over the plausible ranges in BOUNDS.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from servekit.sim.calibrate import FIGURES, Calibration
from servekit.sim.identify import CoefficientEstimate
from servekit.specs import step_coefficients

# Plausible range of each coefficient (declared on StepTimeParams; docs/simulator.md).
BOUNDS: dict[str, tuple[float, float]] = step_coefficients()


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
             "coalesced_chunks": r.coalesced_chunks, "gap_ns": r.gap_ns,
             "preemptions": check.point.server.preemptions}
            # the checks start with the training points, in the reconstructions' order
            for (label, r), check in zip(
                cal.reconstructions, cal.checks[: len(cal.reconstructions)], strict=True
            )
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

    The fitted acceptance replaces the measured temperature's probabilities; other
    temperatures keep what P says (`extends` merges them), though the fit's own predictions
    use the measured temperature for all.
    """
    params = cal.steps.params
    step = {k: round(getattr(params, k), 6) for k in params.__slots__}
    simulator: dict[str, object] = {**base_simulator, "step": step, "sources": [source]}
    lengths = sorted(c.point.input_len for c in cal.checks if not c.held_out)
    simulator["input_len"] = lengths[len(lengths) // 2]  # what it was calibrated at
    if cal.acceptance is not None:
        a = cal.acceptance
        simulator["acceptance"] = {a.temperature: [round(p, 4) for p in a.probabilities]}
    return {"extends": base_name, "name": new_name, "simulator": simulator}
