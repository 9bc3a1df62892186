"""Calibrate the simulator's M3-on-8xA800 coefficients on part of the deployment's figures.

Fits the step coefficients to the seed table's concurrency 1 and 16 (output throughput and
mean latency, EAGLE3 on, input 1024 / output 128, temperature 0.7) and to the deployment's
EAGLE3 statements at those concurrencies (latency cut 20-49% at 1, throughput without
EAGLE3 >= with it at 16; one-sided terms, simulating the no-EAGLE3 variant too) with
`servekit.sim.fit_aggregate` (bounded least squares; `servekit.sim.identify` decides which
coefficients these figures determine). It then predicts the held-out table rows (4 and
128) and statements (4, 8, 32-128), which the fit never sees. The coefficients the figures
cannot determine stay at the values below, each with its physical reason
(docs/simulator.md section 3).

Run: PYTHONPATH=src .venv/bin/python scripts/calibrate_sim.py [--seeds N] [--free-acceptance]
It prints the estimates, the fitted and held-out tables, the EAGLE3 statements, the advice
(over seeds 1..N at the quick demo's request counts and at 256 per point, with --seeds) and
the `simulator:` block of src/servekit/profiles/data/minimax-m3-mxfp8-8xa800.yaml.
`--evaluate` skips the fit and reports on the profile's coefficients.
"""

from __future__ import annotations

import argparse
import random
from functools import cache

from servekit.analyze.compare import compare_runs, speculation_facts
from servekit.analyze.summarize import point_metrics
from servekit.demo import QUICK
from servekit.profiles import load_profile
from servekit.profiles.schema import Profile
from servekit.reference import FITTED_CONCURRENCY, SEED_TABLE
from servekit.results.summary import Summary, Workload
from servekit.sim.build import DEFAULT_ACCEPTANCE, DEFAULT_STEP, build_engine, profile_acceptance
from servekit.sim.engine import Engine
from servekit.sim.fit_aggregate import (
    AggregateFit,
    Coefficients,
    MeasuredPoint,
    PointFit,
    Statement,
    acceptance_name,
    fit_aggregate,
    simulate,
)
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.sim.sweep import simulate_sweep, sweep_summary
from servekit.specs import step_coefficients

ON = load_profile("minimax-m3-mxfp8-8xa800")
OFF = load_profile("minimax-m3-mxfp8-8xa800-no-eagle3")
FITTED = FITTED_CONCURRENCY
HELD_OUT = tuple(p.concurrency for p in SEED_TABLE if p.concurrency not in FITTED)
SEED = 11  # the seed tests/sim/test_calibration.py simulates with
REQUESTS = 256
INPUT_LEN, OUTPUT_LEN, TEMPERATURE = 1024, 128, 0.7

# The values of every coefficient the fit does not determine (docs/simulator.md section 3):
# the roofline defaults of sim/build.py, and one EAGLE3 draft pass from the draft's size.
START = Coefficients(
    StepTimeParams(
        base_ms=DEFAULT_STEP.base_ms,  # fitted
        hbm_efficiency=DEFAULT_STEP.hbm_efficiency,
        # only the prefill steps are compute-bound at c=1 and 16 (an earlier fit offered it:
        # standard error 45)
        compute_efficiency=DEFAULT_STEP.compute_efficiency,
        decode_request_ms=DEFAULT_STEP.decode_request_ms,
        verify_request_ms=DEFAULT_STEP.verify_request_ms,  # fitted
        prefill_request_ms=DEFAULT_STEP.prefill_request_ms,
        # offered, undetermined: 825 MB of draft weights per GPU at 0.6 x 2.039 TB/s
        # (0.67 ms), one layer's kernel floor and the draft's sampling, the default's 1 ms
        draft_pass_ms=DEFAULT_STEP.draft_pass_ms,
        draft_request_ms=DEFAULT_STEP.draft_request_ms,  # offered, undetermined
    ),
    # The EAGLE-family default (acceptance length 2.31 at 0.7, 2.61 at 0.0), written out at
    # the profile's two temperatures. Offered (--free-acceptance), the fit takes the first
    # probability at 0.7 to 0.617, acceptance length 2.10, outside the published 2.3-3.5.
    AcceptanceParams(
        tuple(
            (t, tuple(round(p, 4) for p in DEFAULT_ACCEPTANCE.probabilities(t))) for t in (0.0, 0.7)
        )
    ),
)
# Offered to the fit; identify keeps those the training figures determine.
FREE = (
    "base_ms",
    "verify_request_ms",
    "draft_pass_ms",
    "draft_request_ms",
)


def table_point(concurrency: int) -> MeasuredPoint:
    """The deployment's figures at one concurrency, as a point to fit or predict."""
    row = next(p for p in SEED_TABLE if p.concurrency == concurrency)
    return MeasuredPoint(concurrency, INPUT_LEN, OUTPUT_LEN, TEMPERATURE,
                         row.output_throughput_tok_s, row.avg_latency_s, REQUESTS)  # fmt: skip


def new_engine(step: StepTimeParams, acceptance: AcceptanceParams | None) -> Engine:
    """The EAGLE3 deployment's engine with the given coefficients."""
    return build_engine(ON, seed=SEED, step_params=step, acceptance=acceptance)


def rows(fits: tuple[PointFit, ...]) -> list[str]:
    """Simulated against the table, one line per point."""
    return [
        f"| {f.point.concurrency} | {f.throughput_tok_s:.1f} | {f.point.throughput_tok_s} "
        f"({f.throughput_error:+.1%}) | {f.latency_s:.3f} | {f.point.latency_s} "
        f"({f.latency_error:+.1%}) |"
        for f in fits
    ]


@cache
def metrics(
    profile_on: bool, concurrency: int, temperature: float, c: Coefficients
) -> tuple[float, float, float]:
    """Throughput, mean latency and mean per-stream tok/s of one simulated point."""
    prof = ON if profile_on else OFF
    engine = build_engine(prof, seed=SEED, step_params=c.step, acceptance=c.acceptance)
    point = LoadPoint(f"c={concurrency}", REQUESTS, INPUT_LEN, OUTPUT_LEN, temperature,
                      concurrency=concurrency)  # fmt: skip
    m = point_metrics(run_point(engine, point, random.Random(SEED)).records, ci=False)
    assert m.latency_s.mean is not None
    assert m.per_stream_tok_s.mean is not None
    return m.output_throughput_tok_s, m.latency_s.mean, m.per_stream_tok_s.mean


def latency_cut(concurrency: int, c: Coefficients) -> float:
    """EAGLE3's relative mean-latency cut against the no-EAGLE3 variant at temperature 0.7."""
    on, off = (
        metrics(True, concurrency, TEMPERATURE, c)[1],
        metrics(False, concurrency, TEMPERATURE, c)[1],
    )
    return (off - on) / off


def off_over_on(concurrency: int, c: Coefficients) -> float:
    """Throughput without EAGLE3 over throughput with it, at temperature 0.7."""
    return (
        metrics(False, concurrency, TEMPERATURE, c)[0]
        / metrics(True, concurrency, TEMPERATURE, c)[0]
    )


# The deployment's EAGLE3 statements at the training concurrencies (seed.json eagle3_effect);
# those at 4, 8 and 32-128 are held out.
STATEMENTS = (
    Statement("EAGLE3 latency cut at c=1 (20-49%)", lambda c: latency_cut(1, c), 0.20, 0.49),
    Statement("throughput off/on at c=16 (>= 1)", lambda c: off_over_on(16, c), low=1.0),
)


def eagle3_targets(c: Coefficients) -> list[str]:
    """The deployment's EAGLE3 statements against the simulation (none of them fitted)."""
    out = []
    for conc in (1, 4):
        on, off = metrics(True, conc, 0.7, c)[1], metrics(False, conc, 0.7, c)[1]
        out.append(f"EAGLE3 latency cut at c={conc} (20-49%): {(off - on) / off:.1%}")
    for conc in (8, 16, 32, 64, 128):
        ratio = metrics(False, conc, 0.7, c)[0] / metrics(True, conc, 0.7, c)[0]
        out.append(f"throughput off/on at c={conc} (>= 1): {ratio:.3f}")
    for t, levels in ((0.7, (1, 2, 3)), (0.0, (2, 3, 4))):
        speeds = ", ".join(f"c={n} {metrics(True, n, t, c)[2]:.1f}" for n in levels)
        out.append(f"per-stream tok/s at {t}: {speeds}")
    return out


def quick_sweep(profile: Profile, c: Coefficients, seed: int, requests: int | None) -> Summary:
    """An offline sweep of a profile at the quick demo's levels, with the demo's request
    counts (`requests` None) or `requests` per point."""
    points = [
        LoadPoint(
            f"c={n}",
            requests or QUICK.requests(n),
            INPUT_LEN,
            OUTPUT_LEN,
            TEMPERATURE,
            concurrency=n,
        )
        for n in QUICK.concurrency
    ]

    def engine(point_seed: int) -> Engine:
        return build_engine(profile, seed=point_seed, step_params=c.step, acceptance=c.acceptance)

    results = simulate_sweep(engine, points, seed=seed)
    workload = Workload(input_len=INPUT_LEN, output_len=OUTPUT_LEN, temperature=TEMPERATURE,
                        requests_per_point=requests or QUICK.min_requests, seed=seed)  # fmt: skip
    return sweep_summary(results, profile_name=profile.name, model=None, version="calibrate",
                         started_at="", workload=workload)  # fmt: skip


def advice(c: Coefficients, seed: int = SEED, requests: int | None = None) -> tuple[str, str, str]:
    """`servekit compare`'s EAGLE3 advice on offline sweeps at the quick demo's levels, the
    EAGLE3 throughput gain at each level, and the EAGLE3 sweep's errors against the table."""
    name, max_batch, k = speculation_facts([ON, OFF])
    plain, spec = quick_sweep(OFF, c, seed, requests), quick_sweep(ON, c, seed, requests)
    comparison = compare_runs(plain, spec, spec_name=name, max_batch=max_batch, spec_tokens=k)
    assert comparison.speculation is not None
    gains = ", ".join(f"c={n:g} {g:+.1f}%" for n, g in comparison.speculation.gains_pct)
    by_c = {p.concurrency: p for p in spec.points}
    errors = []
    for row in SEED_TABLE:
        p = by_c[row.concurrency]
        assert p.latency_s.mean is not None
        tput = p.output_throughput_tok_s / row.output_throughput_tok_s - 1
        errors.append(
            f"c={row.concurrency} {tput:+.1%} / {p.latency_s.mean / row.avg_latency_s - 1:+.1%}"
        )
    return comparison.speculation.recommendation.split(";")[0], gains, ", ".join(errors)


def advice_over_seeds(c: Coefficients, seeds: range, requests: int | None) -> None:
    """The advice, gains and table errors (throughput / latency) for each seed, and how
    often each advice came out."""
    counts: dict[str, int] = {}
    for seed in seeds:
        text, gains, errors = advice(c, seed, requests)
        counts[text] = counts.get(text, 0) + 1
        print(f"  seed {seed}: {text} (gain {gains}; table {errors})")
    print(f"  {counts}")


def print_profile_block(fit: AggregateFit) -> None:
    """The `simulator:` section to paste into the profile."""
    c = fit.coefficients
    print("simulator:")
    print(f"  input_len: {INPUT_LEN}")
    print("  step:")
    for key in step_coefficients():
        print(f"    {key}: {getattr(c.step, key):.6g}")
    assert c.acceptance is not None
    print("  acceptance:")
    for t, probs in c.acceptance.points:
        print(f"    {t:g}: [{', '.join(f'{p:g}' for p in probs)}]")


def profile_coefficients() -> Coefficients:
    """The coefficients the profile carries now."""
    assert ON.simulator is not None
    return Coefficients(ON.simulator.step, profile_acceptance(ON))


def report(c: Coefficients, seeds: int) -> None:
    """Fitted and held-out tables, the EAGLE3 statements and the advice over seeds."""
    fitted = simulate(new_engine, c, [table_point(n) for n in FITTED], seed=SEED)
    print("fitted:\n" + "\n".join(rows(fitted)))
    held = simulate(new_engine, c, [table_point(n) for n in HELD_OUT], seed=SEED)
    print("held out:\n" + "\n".join(rows(held)))
    print("\n".join(eagle3_targets(c)))
    print("advice: {} (EAGLE3 throughput gain: {}; table: {})".format(*advice(c)))
    if seeds:
        print(f"advice over seeds 1-{seeds}, the quick demo's request counts:")
        advice_over_seeds(c, range(1, seeds + 1), None)
        print(f"advice over seeds 1-{seeds}, {REQUESTS} requests per point:")
        advice_over_seeds(c, range(1, seeds + 1), REQUESTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--evaluate", action="store_true",
                        help="skip the fit; report on the profile's coefficients")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=0, help="advice over seeds 1..N")
    parser.add_argument("--free-acceptance", action="store_true",
                        help="also offer the first acceptance probability at 0.7 (the rejected "
                        "first fit, docs/simulator.md section 3)")  # fmt: skip
    args = parser.parse_args()
    if args.evaluate:
        report(profile_coefficients(), args.seeds)
        return
    free = FREE + ((acceptance_name(TEMPERATURE, 1),) if args.free_acceptance else ())
    fit = fit_aggregate([table_point(n) for n in FITTED], new_engine=new_engine, start=START,
                        free=free, statements=STATEMENTS, seed=SEED)  # fmt: skip
    print(f"{fit.evaluations} evaluations of the fitted points")
    for st in fit.statements:
        print(
            f"  fitted statement {st.statement.name}: {st.value:.4f} (residual {st.residual:.4f})"
        )
    for e in fit.estimates:
        state = "determined" if e.determined else f"undetermined ({e.note}), kept"
        err = f" +- {e.stderr:.3g}" if e.stderr is not None else ""
        print(f"  {e.name} = {e.value:.4g}{err}: {state}")
    report(fit.coefficients, args.seeds)
    print_profile_block(fit)


if __name__ == "__main__":
    main()
