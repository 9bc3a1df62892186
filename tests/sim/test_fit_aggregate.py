"""fit_aggregate: bounded least squares on aggregate points recovers known coefficients."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from servekit.errors import SimulationError
from servekit.profiles import load_profile
from servekit.sim.build import DEFAULT_ACCEPTANCE, DEFAULT_STEP, build_engine
from servekit.sim.engine import Engine
from servekit.sim.fit_aggregate import (
    AggregateFit,
    Coefficients,
    MeasuredPoint,
    Statement,
    acceptance_name,
    fit_aggregate,
    simulate,
)
from servekit.sim.params import AcceptanceParams, StepTimeParams

PROFILE = load_profile("minimax-m3-mxfp8-8xa800")
OFF = load_profile("minimax-m3-mxfp8-8xa800-no-eagle3")
# Known coefficients to generate "measured" points from.
TRUTH = Coefficients(replace(DEFAULT_STEP, base_ms=12.0, verify_request_ms=1.0), DEFAULT_ACCEPTANCE)


def new_engine(step: StepTimeParams, acceptance: AcceptanceParams | None) -> Engine:
    """The M3 EAGLE3 engine with the given coefficients."""
    return build_engine(PROFILE, seed=3, step_params=step, acceptance=acceptance)


def off_engine(step: StepTimeParams, acceptance: AcceptanceParams | None) -> Engine:
    """The M3 engine without speculative decoding."""
    return build_engine(OFF, seed=3, step_params=step, acceptance=acceptance)


@cache
def truth_points(speculative: bool = True) -> tuple[MeasuredPoint, ...]:
    """The simulator's own throughput and latency at concurrency 1 and 16 (32 requests)."""
    shape = [MeasuredPoint(c, 1024, 128, 0.7, 1.0, 1.0, 32) for c in (1, 16)]
    fits = simulate(new_engine if speculative else off_engine, TRUTH, shape, seed=3)
    return tuple(replace(f.point, throughput_tok_s=f.throughput_tok_s, latency_s=f.latency_s)
                 for f in fits)  # fmt: skip


@cache
def recovered() -> AggregateFit:
    """base_ms and verify_request_ms refitted from a start far from the truth."""
    start = Coefficients(replace(TRUTH.step, base_ms=5.0, verify_request_ms=0.2), TRUTH.acceptance)
    return fit_aggregate(truth_points(), new_engine=new_engine, start=start,
                         free=("base_ms", "verify_request_ms"), seed=3)  # fmt: skip


def test_recovers_the_coefficients_that_generated_the_points() -> None:
    """Fitting the simulator's own output recovers base_ms and verify_request_ms within
    1% and reproduces the points within 0.1%."""
    fit = recovered()
    by_name = {e.name: e for e in fit.estimates}
    assert by_name["base_ms"].determined
    assert by_name["base_ms"].value == pytest.approx(TRUTH.step.base_ms, rel=0.01)
    assert by_name["verify_request_ms"].determined
    assert fit.coefficients.step.verify_request_ms == pytest.approx(
        TRUTH.step.verify_request_ms, rel=0.01
    )
    assert "draft_pass_ms" in fit.fixed
    for f in fit.points:
        assert abs(f.throughput_error) < 1e-3
        assert abs(f.latency_error) < 1e-3


def test_a_coefficient_no_step_uses_is_reported_and_kept() -> None:
    """Without speculative decoding, draft_pass_ms is undetermined, kept at its start value
    and said to be untouched by the data, while base_ms is still recovered."""
    start = Coefficients(replace(TRUTH.step, base_ms=5.0, draft_pass_ms=3.0), None)
    fit = fit_aggregate(truth_points(speculative=False), new_engine=off_engine, start=start,
                        free=("base_ms", "draft_pass_ms"), seed=3)  # fmt: skip
    draft = next(e for e in fit.estimates if e.name == "draft_pass_ms")
    assert not draft.determined
    assert draft.stderr is None
    assert draft.note == "no measured quantity depends on it"
    assert fit.coefficients.step.draft_pass_ms == 3.0
    assert fit.coefficients.step.base_ms == pytest.approx(TRUTH.step.base_ms, rel=0.01)


def test_the_objective_is_deterministic() -> None:
    """Two simulations with the same coefficients and seed give identical figures."""
    a = simulate(new_engine, TRUTH, truth_points(), seed=3)
    b = simulate(new_engine, TRUTH, truth_points(), seed=3)
    assert a == b


def test_refuses_as_many_free_coefficients_as_figures() -> None:
    """Four free coefficients for two points (four figures) is refused, naming the count."""
    with pytest.raises(SimulationError, match="4 free coefficients for 4 measured figures"):
        fit_aggregate(truth_points(), new_engine=new_engine, start=TRUTH,
                      free=("base_ms", "hbm_efficiency", "compute_efficiency",
                            "verify_request_ms"))  # fmt: skip


def test_refuses_an_unknown_coefficient() -> None:
    """A name that is neither a step field nor an acceptance position is refused."""
    with pytest.raises(SimulationError, match="cannot fit base_s: not a coefficient"):
        fit_aggregate(truth_points(), new_engine=new_engine, start=TRUTH, free=("base_s",))


def test_recovers_an_acceptance_probability() -> None:
    """With the step coefficients known, the first draft position's acceptance at 0.7 is
    recovered from the simulator's own points within 0.03 (acceptance draws are discrete)."""
    accept = AcceptanceParams(((0.0, (0.8, 0.65, 0.55)), (0.7, (0.7, 0.55, 0.45))))
    truth = Coefficients(TRUTH.step, accept)
    shape = [MeasuredPoint(c, 1024, 128, 0.7, 1.0, 1.0, 32) for c in (1, 16)]
    points = [replace(f.point, throughput_tok_s=f.throughput_tok_s, latency_s=f.latency_s)
              for f in simulate(new_engine, truth, shape, seed=3)]  # fmt: skip
    start = Coefficients(TRUTH.step, AcceptanceParams(((0.0, (0.8, 0.65, 0.55)),
                                                       (0.7, (0.5, 0.55, 0.45)))))  # fmt: skip
    name = acceptance_name(0.7, 1)
    fit = fit_aggregate(points, new_engine=new_engine, start=start, free=(name,), seed=3)
    assert fit.estimates[0].name == "acceptance_0.7_p1"
    assert fit.estimates[0].determined
    assert fit.coefficients.acceptance is not None
    assert fit.coefficients.acceptance.probabilities(0.7)[0] == pytest.approx(0.7, abs=0.03)
    assert fit.coefficients.acceptance.probabilities(0.0) == (0.8, 0.65, 0.55)


def test_a_statement_residual_is_its_distance_outside_the_range() -> None:
    """A stated range gives zero inside (edges included) and the distance outside."""
    cut = Statement("cut 20-49%", lambda c: 0.0, 0.20, 0.49)
    assert [cut.residual(v) for v in (0.20, 0.35, 0.49)] == [0.0, 0.0, 0.0]
    assert cut.residual(0.15) == pytest.approx(0.05)
    assert cut.residual(0.52) == pytest.approx(0.03)
    at_least = Statement("off/on >= 1", lambda c: 0.0, low=1.0)
    assert at_least.residual(1e9) == 0.0
    assert at_least.residual(0.97) == pytest.approx(0.03)


def test_a_satisfied_statement_changes_nothing() -> None:
    """A statement the fit satisfies with room to spare neither moves the solution nor
    counts as a figure: the fit and its standard errors equal the fit without it."""
    start = Coefficients(replace(TRUTH.step, base_ms=5.0, verify_request_ms=0.2), TRUTH.acceptance)
    loose = Statement("c=1 latency under 100 s", lambda c: 1.0, high=100.0)
    fit = fit_aggregate(truth_points(), new_engine=new_engine, start=start,
                        free=("base_ms", "verify_request_ms"), statements=(loose,),
                        seed=3)  # fmt: skip
    assert fit.estimates == recovered().estimates
    assert fit.coefficients == recovered().coefficients
    assert [(s.value, s.residual) for s in fit.statements] == [(1.0, 0.0)]


def test_a_statement_determines_what_the_points_cannot() -> None:
    """From points without speculative decoding draft_pass_ms is undetermined; a statement
    of the EAGLE3 engine's latency at concurrency 1 (the truth's, as a point range) makes it
    a figure the fit reproduces, and draft_pass_ms is recovered within 2%."""
    c1 = [MeasuredPoint(1, 1024, 128, 0.7, 1.0, 1.0, 32)]

    def eagle3_latency(c: Coefficients) -> float:
        return simulate(new_engine, c, c1, seed=3)[0].latency_s

    truth = eagle3_latency(TRUTH)
    said = Statement("EAGLE3 latency at c=1", eagle3_latency, truth, truth)
    start = Coefficients(replace(TRUTH.step, base_ms=5.0, draft_pass_ms=3.0), TRUTH.acceptance)
    fit = fit_aggregate(truth_points(speculative=False), new_engine=off_engine, start=start,
                        free=("base_ms", "draft_pass_ms"), statements=(said,),
                        seed=3)  # fmt: skip
    draft = next(e for e in fit.estimates if e.name == "draft_pass_ms")
    assert draft.determined
    assert draft.value == pytest.approx(TRUTH.step.draft_pass_ms, rel=0.02)
    assert fit.statements[0].residual == pytest.approx(0.0, abs=1e-3 * truth)
