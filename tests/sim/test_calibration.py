"""The M3-on-8xA800 calibration against the deployment's figures (benchmarks/corpus/seed.json).

The profile's coefficients are fitted to the table's concurrency 1 and 16 and to the EAGLE3
statements at those concurrencies (scripts/calibrate_sim.py); the table at 4 and 128 and the
statements at 4, 8 and 32-128 are predictions. Fit error and held-out error are asserted
separately, each with the bound the calibration states (servekit.reference, docs/simulator.md
section 3). Statements the model does not meet are strict xfails, so a
model change that meets them turns them into failures that demand an update.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from servekit.analyze.compare import compare_runs, speculation_facts
from servekit.analyze.summarize import PointMetrics, point_metrics
from servekit.demo import QUICK
from servekit.profiles import load_profile
from servekit.profiles.schema import Profile
from servekit.reference import FIT_BOUND, FITTED_CONCURRENCY, HELD_OUT_BOUND, SEED_TABLE
from servekit.results.summary import Summary, Workload
from servekit.sim.build import DEFAULT_ACCEPTANCE, DEFAULT_STEP, build_engine, profile_acceptance
from servekit.sim.fit_aggregate import Coefficients, MeasuredPoint, Statement, residuals, simulate
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.sweep import simulate_sweep, sweep_summary
from servekit.specs import step_coefficients

ON = "minimax-m3-mxfp8-8xa800"
OFF = "minimax-m3-mxfp8-8xa800-no-eagle3"
SEED_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "seed.json"
TABLE = [(p.concurrency, p.output_throughput_tok_s, p.avg_latency_s) for p in SEED_TABLE]
FITTED = FITTED_CONCURRENCY
# What scripts/calibrate_sim.py's fit determined; every other coefficient is fixed at the
# roofline default (docs/simulator.md section 3). The fit's own error at 1 and 16 was
# +0.7% / -0.5% and +0.1% / +1.9%; held out, 4 was off by -6.3% / +8.7% and 128 by
# -17.9% / +20.0% (throughput / latency).
FITTED_COEFFICIENTS = ("base_ms", "verify_request_ms")


@cache
def measure(profile: str, concurrency: int, temperature: float = 0.7) -> PointMetrics:
    """Simulate 256 requests (input 1024, output 128) at one concurrency."""
    prof = load_profile(profile)
    point = LoadPoint(f"c={concurrency}", 256, 1024, 128, temperature, concurrency=concurrency)
    run = run_point(build_engine(prof, seed=11), point, random.Random(11))
    return point_metrics(run.records, ci=False)


def test_table_matches_seed_file() -> None:
    """The figures asserted here are the deployment's own (seed.json)."""
    seed = json.loads(SEED_FILE.read_text(encoding="utf-8"))
    rows = [
        (p["concurrency"], p["output_throughput_tok_s"], p["avg_latency_s"])
        for p in seed["throughput_with_eagle3"]["points"]
    ]
    assert rows == TABLE


def _errors(concurrency: int) -> tuple[float, float]:
    _, throughput, latency = next(row for row in TABLE if row[0] == concurrency)
    m = measure(ON, concurrency)
    assert m.latency_s.mean is not None
    return m.output_throughput_tok_s / throughput - 1, m.latency_s.mean / latency - 1


@pytest.mark.parametrize("concurrency", FITTED)
def test_fitted_points_within_fit_error(concurrency: int) -> None:
    """At the fitted concurrency 1 and 16, throughput and latency are within 2% of the table."""
    throughput_error, latency_error = _errors(concurrency)
    assert abs(throughput_error) <= FIT_BOUND
    assert abs(latency_error) <= FIT_BOUND


@pytest.mark.parametrize("concurrency", sorted(HELD_OUT_BOUND))
def test_held_out_points_within_stated_error(concurrency: int) -> None:
    """Predicted, never fitted: concurrency 4 within 10% and 128 within 22% of the table."""
    throughput_error, latency_error = _errors(concurrency)
    assert abs(throughput_error) <= HELD_OUT_BOUND[concurrency]
    assert abs(latency_error) <= HELD_OUT_BOUND[concurrency]


def _fit_cost(step_values: dict[str, float]) -> float:
    """The fit's objective with the profile's coefficients changed as given (same seed):
    squared relative errors at the fitted points plus the squared violations of the fitted
    statements (latency cut 20-49% at c=1, throughput off >= on at c=16)."""
    on, off = load_profile(ON), load_profile(OFF)
    assert on.simulator is not None
    step = replace(on.simulator.step, **step_values)
    coefficients = Coefficients(step, profile_acceptance(on))
    points = [MeasuredPoint(c, 1024, 128, 0.7, t, lat, 256) for c, t, lat in TABLE if c in FITTED]
    fits = simulate(lambda s, a: build_engine(on, seed=11, step_params=s, acceptance=a),
                    coefficients, points, seed=11)  # fmt: skip

    def run(prof: Profile, concurrency: int) -> PointMetrics:
        point = LoadPoint(f"c={concurrency}", 256, 1024, 128, 0.7, concurrency=concurrency)
        engine = build_engine(prof, seed=11, step_params=step, acceptance=coefficients.acceptance)
        return point_metrics(run_point(engine, point, random.Random(11)).records, ci=False)

    on1, off1, on16, off16 = run(on, 1), run(off, 1), run(on, 16), run(off, 16)
    assert on1.latency_s.mean is not None
    assert off1.latency_s.mean is not None
    cut = Statement("cut at c=1", lambda c: 0.0, 0.20, 0.49)
    ratio = Statement("off/on at c=16", lambda c: 0.0, low=1.0)
    said = [
        cut.residual((off1.latency_s.mean - on1.latency_s.mean) / off1.latency_s.mean),
        ratio.residual(off16.output_throughput_tok_s / on16.output_throughput_tok_s),
    ]
    return float((residuals(fits) ** 2).sum() + sum(r * r for r in said))


@pytest.mark.parametrize("name", FITTED_COEFFICIENTS)
def test_profile_carries_the_fit_unadjusted(name: str) -> None:
    """The profile's fitted coefficients are the least-squares optimum of the fit's objective:
    moving one by 1% of its plausible range either way raises the fit's cost (a hand
    adjustment such as the former base_ms 14.39 -> 13.8 would not be)."""
    prof = load_profile(ON)
    assert prof.simulator is not None
    value = getattr(prof.simulator.step, name)
    lo, hi = step_coefficients()[name]
    at = _fit_cost({})
    for moved in (value - 0.01 * (hi - lo), value + 0.01 * (hi - lo)):
        assert _fit_cost({name: moved}) > at


def test_profile_fixes_the_rest_at_the_roofline_defaults() -> None:
    """Coefficients the figures do not determine carry sim/build.py's roofline defaults and
    the EAGLE-family default acceptance, not values searched against the table."""
    prof = load_profile(ON)
    assert prof.simulator is not None
    for name in step_coefficients():
        if name not in FITTED_COEFFICIENTS:
            assert getattr(prof.simulator.step, name) == getattr(DEFAULT_STEP, name), name
    accept = profile_acceptance(prof)
    for temperature in (0.0, 0.7):
        assert accept.probabilities(temperature) == pytest.approx(
            DEFAULT_ACCEPTANCE.probabilities(temperature), abs=1e-4
        )


def _cut(concurrency: int) -> float:
    on, off = measure(ON, concurrency).latency_s.mean, measure(OFF, concurrency).latency_s.mean
    assert on is not None
    assert off is not None
    return (off - on) / off


def test_eagle3_cuts_latency_at_concurrency_1() -> None:
    """Fitted statement: at concurrency 1 EAGLE3 cuts mean latency by 20-49% (35.1%)."""
    assert 0.20 <= _cut(1) <= 0.49


@pytest.mark.xfail(strict=True, reason="held out; the model gives a 14.5% cut at c=4")
def test_eagle3_cuts_latency_at_concurrency_4() -> None:
    """Held out: at concurrency 4 EAGLE3 cuts mean latency by 20-49%."""
    assert 0.20 <= _cut(4) <= 0.49


def _off_over_on(concurrency: int) -> float:
    off = measure(OFF, concurrency).output_throughput_tok_s
    return off / measure(ON, concurrency).output_throughput_tok_s


def test_no_eagle3_gain_at_16_within_the_fit_error() -> None:
    """Fitted statement: at concurrency 16 throughput without EAGLE3 is at least that with it,
    up to the fit's bound (the fit leaves it 1.7% short: off/on 0.983)."""
    assert _off_over_on(16) >= 1 - FIT_BOUND


@pytest.mark.xfail(strict=True, reason="fitted, left 1.7% short by the fit: off/on 0.983")
def test_no_eagle3_gain_at_16() -> None:
    """Fitted statement, exactly: at concurrency 16 throughput without EAGLE3 >= with it."""
    assert _off_over_on(16) >= 1


@pytest.mark.parametrize("concurrency", [32, 64, 128])
def test_no_eagle3_gain_from_32(concurrency: int) -> None:
    """Held out: from concurrency 32 on, throughput without EAGLE3 >= with it."""
    assert _off_over_on(concurrency) >= 1


@pytest.mark.xfail(strict=True, reason="held out; the model gives off/on 0.951 at c=8")
def test_no_eagle3_gain_at_8() -> None:
    """Held out: at concurrency 8 throughput without EAGLE3 is at least that with it."""
    assert _off_over_on(8) >= 1


def _advice(seed: int, requests: int | None) -> str:
    """`compare`'s EAGLE3 advice on simulated no-EAGLE3 and EAGLE3 sweeps at the quick demo's
    levels, with the demo's request counts (`requests` None) or `requests` per point."""

    def sweep(profile: str) -> Summary:
        prof = load_profile(profile)
        points = [LoadPoint(f"c={c}", requests or QUICK.requests(c), 1024, 128, 0.7,
                            concurrency=c) for c in QUICK.concurrency]  # fmt: skip
        results = simulate_sweep(lambda s: build_engine(prof, seed=s), points, seed=seed)
        per_point = requests or QUICK.min_requests
        workload = Workload(input_len=1024, output_len=128, temperature=0.7,
                            requests_per_point=per_point, seed=seed)  # fmt: skip
        return sweep_summary(results, profile_name=profile, model=None, version="test",
                             started_at="", workload=workload)  # fmt: skip

    name, max_batch, k = speculation_facts([load_profile(ON), load_profile(OFF)])
    comparison = compare_runs(sweep(OFF), sweep(ON), spec_name=name, max_batch=max_batch,
                              spec_tokens=k)  # fmt: skip
    assert comparison.speculation is not None
    return comparison.speculation.recommendation.split(";")[0]


ADVICE = "enable EAGLE3 at concurrency <= 4"


@pytest.mark.slow
def test_eagle3_advice_follows_at_the_quick_demos_request_counts() -> None:
    """At the quick demo's levels and request counts (max(2c, 16)), `compare` of the
    simulated sweeps recommends EAGLE3 at concurrency <= 4, as the deployment decided, for
    each of simulation seeds 1-10 (the c=8 gain stays -3.6% to +3.1%, under the 5% asked)."""
    assert [_advice(seed, None) for seed in range(1, 11)] == [ADVICE] * 10


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="with 256 requests, seeds 8 and 9 advise <= 8 "
                   "(c=8 gain +4.0% to +5.6% over seeds 1-10)")  # fmt: skip
def test_eagle3_advice_follows_in_the_steady_state() -> None:
    """With 256 requests per point, the advice is EAGLE3 at concurrency <= 4 for each of
    seeds 1-10."""
    assert [_advice(seed, 256) for seed in range(1, 11)] == [ADVICE] * 10


def _per_stream(concurrency: int, temperature: float) -> float:
    value = measure(ON, concurrency, temperature).per_stream_tok_s.mean
    assert value is not None
    return value


def test_per_stream_60_crossover_at_temperature_07() -> None:
    """At 0.7 each stream keeps >= 60 tok/s up to concurrency 2 and falls below at 3."""
    assert _per_stream(1, 0.7) >= 60
    assert _per_stream(2, 0.7) >= 60
    assert _per_stream(3, 0.7) < 60


def test_per_stream_60_crossover_at_temperature_0() -> None:
    """At 0.0 each stream keeps >= 60 tok/s up to concurrency 3 and falls below at 4."""
    assert _per_stream(3, 0.0) >= 60
    assert _per_stream(4, 0.0) < 60


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_acceptance_lengths_are_published_range(temperature: float) -> None:
    """The EAGLE3 acceptance lengths lie in the published 2.3-3.5 range for k=3."""
    accept = profile_acceptance(load_profile(ON))
    assert 2.3 <= accept.mean_acceptance_length(temperature, 3) <= 3.5
