"""Calibrate the simulator from measured points and check it on held-out ones (core).

`calibrate` reconstructs the engine steps of every training point (servekit.sim.fit_steps),
fits the step coefficients to their durations (servekit.sim.fit_coefficients) and the
acceptance to the spec-decode counters or verify chunks (servekit.sim.fit_acceptance), then
simulates every point, training and held out, offline with the fitted values (same
concurrency or rate and arrival process, request count, lengths and temperature) and sets
the prediction against the measurement. Training errors are fit errors; held-out errors
are predictions of points the fit never saw.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servekit.analyze.summarize import point_metrics
from servekit.errors import SimulationError
from servekit.profiles.schema import Profile
from servekit.records import RequestRecord
from servekit.results.summary import ServerBlock
from servekit.sim.build import build_engine, profile_sim_model, profile_step_params
from servekit.sim.fit_acceptance import AcceptanceFit, fit_acceptance
from servekit.sim.fit_coefficients import StepFit, fit_step_coefficients, observations
from servekit.sim.fit_steps import Reconstruction, reconstruct_steps, running_at
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import AcceptanceParams
from servekit.specs import GpuSpec


@dataclass(frozen=True, slots=True)
class RunPoint:
    """One measured load point: how it was loaded and what each request did.

    Attributes:
        label: the point's label in the run ("c=4", "rate=2").
        concurrency: closed-loop concurrency, or None.
        rate_rps: open-loop rate, or None.
        arrival: the open loop's arrival process (poisson, constant, gamma:SHAPE).
        temperature: sampling temperature.
        records: the point's request records.
        server: the summary's server block for the point.
        source: where the point came from (run directory).
    """

    label: str
    concurrency: int | None
    rate_rps: float | None
    arrival: str
    temperature: float
    records: tuple[RequestRecord, ...]
    server: ServerBlock
    source: str = ""

    @property
    def input_len(self) -> int:
        """Median prompt tokens of the successful requests."""
        return round(statistics.median(r.prompt_tokens for r in self.records if r.ok))

    @property
    def output_len(self) -> int:
        """Median output tokens of the successful requests."""
        return round(statistics.median(r.output_tokens for r in self.records if r.ok))


@dataclass(frozen=True, slots=True)
class Figures:
    """The per-point figures compared: throughput, latency, TTFT and ITL."""

    output_tok_s: float
    latency_mean_s: float
    latency_p90_s: float
    ttft_mean_ms: float
    itl_mean_ms: float


FIGURES = ("output_tok_s", "latency_mean_s", "latency_p90_s", "ttft_mean_ms", "itl_mean_ms")


def figures(records: Sequence[RequestRecord]) -> Figures:
    """The compared figures of a point's records (one code path for measured and simulated)."""
    m = point_metrics(records, ci=False)
    return Figures(
        m.output_throughput_tok_s,
        m.latency_s.mean or 0.0,
        m.latency_s.p90 or 0.0,
        m.ttft_ms.mean or 0.0,
        m.itl_ms.mean or 0.0,
    )


@dataclass(frozen=True, slots=True)
class PointCheck:
    """Predicted against measured for one point.

    Attributes:
        point: the measured point.
        held_out: True when the fit did not see it.
        measured: its measured figures.
        predicted: the simulation's figures with the fitted coefficients.
    """

    point: RunPoint
    held_out: bool
    measured: Figures
    predicted: Figures

    def error(self, name: str) -> float:
        """Relative error of one figure (predicted / measured - 1; 0 when both are 0)."""
        m, p = getattr(self.measured, name), getattr(self.predicted, name)
        return p / m - 1 if m else 0.0


@dataclass(frozen=True, slots=True)
class Calibration:
    """A calibration: the fitted values, how they were found, and every point checked.

    Attributes:
        steps: the step-coefficient fit.
        acceptance: the acceptance fit (None without speculative decoding).
        reconstructions: (label, reconstruction) of each training point.
        running: per training point with /metrics samples, (label, mean of the server's
            num_requests_running samples, mean of the reconstruction's at the same times).
        checks: training points first, then held-out ones.
        seed: seed of the simulations.
    """

    steps: StepFit
    acceptance: AcceptanceFit | None
    reconstructions: tuple[tuple[str, Reconstruction], ...]
    running: tuple[tuple[str, float, float], ...]
    checks: tuple[PointCheck, ...]
    seed: int


def acceptance_params(fit: AcceptanceFit | None) -> AcceptanceParams | None:
    """The engine's acceptance from a fit (the measured temperature stands for all)."""
    if fit is None:
        return None
    return AcceptanceParams(points=((fit.temperature, fit.probabilities),))


def calibrate(
    profile: Profile,
    training: Sequence[RunPoint],
    holdout: Sequence[RunPoint] = (),
    *,
    seed: int = 0,
    realizations: int = 1,
    gap_ns: int | None = None,
    profile_of: Callable[[RunPoint], Profile] | None = None,
    gpu: GpuSpec | None = None,
) -> Calibration:
    """Fit the simulator to `training` and predict every point.

    Args:
        profile: the measured deployment (its plan gives the work of each step; its
            coefficients are the start and the values kept for undetermined ones).
        training: the points to fit.
        holdout: points to predict only.
        profile_of: the deployment each point measured, when the points measured variants
            of `profile` (another max_num_seqs, speculation on or off: `servekit tune`);
            the step coefficients are one fit over all of them, the acceptance a fit over
            the points that speculate (all with the same number of draft tokens).
        seed: seeds the simulated arrivals and acceptance draws.
        realizations: simulations per point, seeds seed, seed + 1, ...; the predicted
            figures are their means (an open loop's arrivals, and speculation's acceptance,
            are random: one draw is one realization of the measured point's process).
        gap_ns: cluster gap of the step reconstruction (default: from each point's chunks).
        gpu: the hardware every point ran on, as measured, instead of the catalog entry the
            profiles name (`profile_sim_model`).

    Raises:
        SimulationError: a point has no usable records, or nothing to fit.
    """
    if not training:
        raise SimulationError(
            "no training point to fit", fix="pass at least one measured run directory"
        )
    deployment = profile_of or (lambda _: profile)
    speculating = [p for p in training if _draft_tokens(deployment(p))]
    ks = sorted({_draft_tokens(deployment(p)) for p in speculating})
    if len(ks) > 1:
        raise SimulationError(
            f"the training points speculate with {ks} draft tokens; acceptance is fitted at one",
            fix="fit runs of one num_speculative_tokens",
        )
    temperatures = sorted({p.temperature for p in speculating})
    if len(temperatures) > 1:
        raise SimulationError(
            f"the training points were measured at temperatures {temperatures}; acceptance "
            "is fitted at one",
            fix="fit runs of one temperature (acceptance differs between temperatures)",
        )
    rebuilt = []
    obs = []
    for point in training:
        measured = deployment(point)
        rec = reconstruct_steps(
            point.records,
            max_num_batched_tokens=measured.serve_args.max_num_batched_tokens,
            num_speculative_tokens=_draft_tokens(measured),
            gap_ns=gap_ns,
        )
        rebuilt.append((point.label, rec))
        obs += observations(rec.intervals, profile_sim_model(measured, gpu=gpu))
    steps = fit_step_coefficients(obs, profile_step_params(profile))
    accept = None
    if speculating:
        accept = fit_acceptance(
            [(p.records, p.server.spec_acceptance_per_position) for p in speculating],
            k=ks[0],
            temperature=speculating[0].temperature,
        )
    checks = []
    for held_out, points in ((False, training), (True, holdout)):
        for point in points:
            simulated = []
            for draw in range(seed, seed + realizations):
                engine = build_engine(
                    deployment(point), seed=draw, step_params=steps.params,
                    acceptance=acceptance_params(accept), gpu=gpu,
                )  # fmt: skip
                simulated.append(
                    figures(run_point(engine, _load_point(point), random.Random(draw)).records)
                )
            predicted = Figures(
                *(statistics.fmean(getattr(f, n) for f in simulated) for n in FIGURES)
            )
            checks.append(PointCheck(point, held_out, figures(point.records), predicted))
    running = tuple(
        check for point, (_, rec) in zip(training, rebuilt, strict=True)
        if (check := _running_check(point, rec)) is not None
    )  # fmt: skip
    return Calibration(steps, accept, tuple(rebuilt), running, tuple(checks), seed)


def _draft_tokens(profile: Profile) -> int:
    """Draft tokens per step of a deployment (0 without speculative decoding)."""
    return profile.speculative.config.num_speculative_tokens if profile.speculative else 0


def _running_check(point: RunPoint, rec: Reconstruction) -> tuple[str, float, float] | None:
    """The server's mean running requests against the reconstruction's, at the sample times
    (seconds since the point started, taken as its first send)."""
    samples = point.server.samples or []
    if not samples:
        return None
    start = min(r.sent_ns for r in point.records)
    times = [start + int(float(s[0]) * 1e9) for s in samples]
    rebuilt = running_at(rec, times)
    served = [float(s[2]) for s in samples]
    return point.label, statistics.fmean(served), statistics.fmean(rebuilt)


def _load_point(point: RunPoint) -> LoadPoint:
    return LoadPoint(
        point.label,
        sum(1 for r in point.records if r.ok),
        point.input_len,
        point.output_len,
        point.temperature,
        concurrency=point.concurrency,
        rate_rps=point.rate_rps,
        arrival=point.arrival,
    )
