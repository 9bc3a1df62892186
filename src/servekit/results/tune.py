"""`tune.json`, the result of `servekit tune`, as one typed model (core).

Every candidate with its feasibility and prediction; the finalists with their load ladders
and the Pareto front of throughput per GPU against per-stream speed; every verification on
the real engine, predicted against measured; the winner as a profile variant and its
launch command; the winner against the input profile as it is (`as_is`). Goodput is the
request rate served at the highest load that meets the SLO (docs/tune.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError

from servekit.results._base import Document, DocumentError, first_error, refuse_newer

TUNE_VERSION: Literal[1] = 1


class LoadBlock(Document):
    """One load level of a candidate, simulated or measured (all replicas together)."""

    load: float = Field(description="concurrency, requests/s or trace speed, all replicas")
    met: bool = Field(description="every SLO bound holds and no request failed")
    violated: list[str]
    request_rps: float
    output_tok_s: float
    per_stream_tok_s: float | None = Field(description="median 1 / TPOT, tok/s")
    attainment: float = Field(description="fraction of requests within every bound alone")
    requests: int
    run_dir: str | None = None  # a measured point: its bench run directory


class Prediction(Document):
    """A candidate's SLO-meeting load and goodput in the simulator, at one fidelity."""

    load: float | None = Field(description="highest load meeting the SLO; null: none")
    goodput_rps: float
    goodput_per_gpu: float
    requests: int = Field(description="requests per simulated point")
    capped: bool = Field(description="still meeting the SLO at the load's ceiling")
    model_round: int = Field(
        description="the simulator calibration round (0: before any verification)"
    )


class CandidateBlock(Document):
    """One candidate of the space."""

    id: str
    label: str
    settings: dict[str, str | int | float | bool | None]
    gpus: int
    feasible: bool
    reason: str | None = Field(description="why it cannot run (the planner's or vLLM's)")
    oom_risk: str | None = Field(description="the planner's OOM-risk warning it is inside of")
    kv_cache_tokens: int
    max_concurrency_at_max_model_len: float
    changes: int = Field(description="settings that differ from the input profile")
    prediction: Prediction | None = Field(description="its last (highest-rung) evaluation")
    rung: int | None = None


class FinalistBlock(Document):
    """A finalist: ranked, with its whole ladder."""

    id: str
    rank: int
    note: str | None = None
    ladder: list[LoadBlock]
    ladder_tok_s_per_gpu: float


class ParetoPoint(Document):
    """A non-dominated ladder point."""

    id: str
    load: float
    per_stream_tok_s: float
    output_tok_s_per_gpu: float


class RungBlock(Document):
    """One rung of successive halving."""

    requests: int
    evaluated: int
    kept: int


class ModelRound(Document):
    """The simulator's calibration of one round."""

    round: int
    source: str
    step: dict[str, float]
    acceptance: list[float] | None = None
    fitted_points: int = 0
    fit_rms_ms: float | None = None
    undetermined: list[str] = Field(default_factory=list)


class SearchBlock(Document):
    """One search round (one calibration)."""

    round: int
    rungs: list[RungBlock]
    simulated: int
    reused: int
    wall_s: float
    ranking: list[str] = Field(description="finalist ids, best first")
    speculation: str | None


class Verification(Document):
    """A candidate launched on the real engine: predicted against measured."""

    id: str
    round: int = Field(description="the search round that chose it")
    predicted: Prediction
    measured_load: float | None
    measured_goodput_rps: float
    measured_goodput_per_gpu: float
    lower_bound: bool = Field(description="the SLO still held at the last load measured")
    points: list[LoadBlock]
    error: float | None = Field(description="predicted / measured goodput - 1")
    within_bound: bool
    fitted_on_own: bool = Field(
        description="the prediction's model was fitted on this candidate's own measurements"
    )
    final_prediction: Prediction | None = Field(
        default=None, description="the last round's prediction, when a refit came after"
    )
    startup_s: float | None = None
    status: Literal["measured", "failed", "skipped"] = "measured"
    detail: str | None = None


class KvHeadroom(Document):
    """The winner's KV cache against its max_model_len."""

    kv_cache_tokens: int
    max_model_len: int
    requests_at_max_model_len: float


class Winner(Document):
    """The recommended configuration."""

    id: str
    label: str
    chosen_by: Literal["measured", "predicted"]
    profile_file: str
    profile_name: str
    launch_command: str
    max_num_seqs: int
    speculation: str
    goodput_per_gpu: float
    load: float | None
    kv: KvHeadroom


class AsIs(Document):
    """The input profile as the user gave it (its own settings, unchanged), set against the
    winner: both predicted by the same calibration at the full request count, and measured
    when verification measured both.

    An optional key of version 1: a tune.json written before it existed has none.
    """

    id: str
    label: str
    in_space: bool = Field(description="the search space holds it (it was searched too)")
    feasible: bool
    reason: str | None = Field(description="why it cannot run (the planner's or vLLM's)")
    predicted: Prediction | None = Field(
        description="its SLO-meeting load and goodput (null: it cannot run)"
    )
    measured_load: float | None = Field(
        description="highest load measured that met the SLO (null: none, or not measured)"
    )
    measured_goodput_per_gpu: float | None = Field(
        description="req/s per GPU at measured_load (0: measured, no load met the SLO; "
        "null: not measured)"
    )
    winner_id: str | None = Field(description="the winner it is set against (null: none)")
    winner_predicted_goodput_per_gpu: float | None = Field(
        description="the winner's, by the same calibration as `predicted`"
    )
    winner_measured_goodput_per_gpu: float | None = Field(
        description="the winner's measured (null: not measured)"
    )
    gain_predicted: float | None = Field(
        description="winner / as-is predicted goodput per GPU - 1 (null: either has none)"
    )
    gain_measured: float | None = Field(
        description="winner / as-is measured goodput per GPU - 1 (null: either has none or "
        "was not measured)"
    )


class TuneDocument(Document):
    """The whole tune.json."""

    schema_version: Literal[1]
    servekit_version: str
    started_at: str
    profile: str
    slo: str
    workload: dict[str, str | int | float | None]
    load_unit: str
    space: dict[str, list[str]]
    candidates_total: int
    feasible: int
    model_rounds: list[ModelRound]
    searches: list[SearchBlock]
    candidates: list[CandidateBlock]
    finalists: list[FinalistBlock]
    pareto: list[ParetoPoint]
    verification: list[Verification]
    verify_bound: float
    winner: Winner | None
    as_is: AsIs | None = None  # absent in a tune.json written before it existed
    verdict: list[str]


def load_tune(doc: object, *, where: str = "tune.json") -> TuneDocument:
    """Validate a parsed tune.json.

    Raises:
        DocumentError: a newer or unknown schema_version, or an invalid document.
    """
    refuse_newer(doc, kind="tune", current=TUNE_VERSION, where=where)
    if isinstance(doc, dict) and "schema_version" not in doc:
        # Written before tune.json named its version ("version 0"): the same keys otherwise.
        doc = {"schema_version": TUNE_VERSION, **doc}
    try:
        return TuneDocument.model_validate(doc)
    except ValidationError as exc:
        raise DocumentError(
            f"{where} is not a servekit tune.json: {first_error(exc)}",
            fix="pass the --out directory of servekit tune",
        ) from None
