"""`servekit sim fit --json` as one typed model (core): the fit's points, coefficients and
diagnostics (docs/schemas/sim-fit.schema.json). `sim.fit.calibration_json` fills it."""

from __future__ import annotations

from typing import Literal

from servekit.results import Document

SIM_FIT_VERSION: Literal[1] = 1


class FitFigures(Document):
    """The figures a point is judged by (`sim.calibrate.FIGURES`)."""

    output_tok_s: float
    latency_mean_s: float
    latency_p90_s: float
    ttft_mean_ms: float
    itl_mean_ms: float


class FitPoint(Document):
    """One measured point, fitted or held out: measured, predicted and relative error."""

    label: str
    source: str
    held_out: bool
    concurrency: int | None
    rate_rps: float | None
    requests: int
    measured: FitFigures
    predicted: FitFigures
    error: FitFigures


class Coefficient(Document):
    """One step-time coefficient: value, whether the data determined it, its standard error."""

    name: str
    value: float
    determined: bool
    stderr: float | None
    note: str


class DraftAcceptance(Document):
    """The draft's acceptance per position, where the runs had speculative decoding."""

    temperature: float
    probabilities: tuple[float, ...]
    stderr: tuple[float | None, ...]
    verifies: int
    source: str
    from_chunks: tuple[float, ...]


class StepFit(Document):
    """How well the step-time model fits the engine's step intervals."""

    intervals: int
    outliers: int
    rms_ms: float
    mean_abs_rel: float


class Reconstruction(Document):
    """One training run's engine steps as reconstructed from its records and counters."""

    label: str
    steps: int
    intervals: int
    after_idle: int
    unseen_prefill_steps: int
    coalesced_chunks: int
    gap_ns: int
    preemptions: int | None


class RunningCheck(Document):
    """The server's mean running requests against the reconstruction's."""

    label: str
    server_mean: float
    reconstructed_mean: float


class SimFitDocument(Document):
    """The fit of one profile's simulator to measured runs.

    Attributes:
        profile: the profile fitted.
        points: training points first, then held-out ones.
        coefficients: the step-time coefficients.
        admission: the admission coefficient, when the model has one.
        acceptance: the draft's acceptance, when the runs speculated.
        step_fit, reconstruction, running: diagnostics of the fit.
        seed: the simulation seed of the predictions.
        output: the calibrated profile written with -o (None without).
    """

    schema_version: Literal[1]
    profile: str
    points: tuple[FitPoint, ...]
    coefficients: tuple[Coefficient, ...]
    admission: Coefficient | None
    acceptance: DraftAcceptance | None
    step_fit: StepFit
    reconstruction: tuple[Reconstruction, ...]
    running: tuple[RunningCheck, ...]
    seed: int
    output: str | None
