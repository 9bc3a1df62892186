"""tune.json and the winner's profile from a tune run's results (core).

The winner is the measured best of the verified finalists when any was measured (the
measurement, not the prediction, decides), else the predicted best. The verdict is a few
lines for the terminal and the report's first screen: what the winner gains against the
input profile as it is (`tune.baseline`: both predicted by the same calibration, and
measured when verification measured both), the SLO and the load it is met at, the winner's settings
(speculation and its per-batch-size schedule, max_num_seqs, the KV headroom at
max_model_len), and how well the predictions held on the real engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from servekit.analyze.slo import Slo
from servekit.profiles.schema import Profile
from servekit.render.targets import render
from servekit.results.tune import (
    TUNE_VERSION,
    AsIs,
    CandidateBlock,
    FinalistBlock,
    KvHeadroom,
    LoadBlock,
    ModelRound,
    ParetoPoint,
    Prediction,
    RungBlock,
    SearchBlock,
    TuneDocument,
    Verification,
    Winner,
)
from servekit.tune.baseline import Baseline, as_is_line, gain
from servekit.tune.evaluate import Evaluation, LoadResult, SimModel
from servekit.tune.search import Candidate, Finalist, SearchResult
from servekit.tune.space import Settings, Space, overrides
from servekit.tune.workload import TuneWorkload


@dataclass(frozen=True, slots=True)
class SearchRound:
    """One search: its calibration round, result and wall time, and the input profile as it
    is under the same calibration (`as_is`: at the full request count; None when it cannot
    run)."""

    round: int
    result: SearchResult
    wall_s: float
    model: SimModel
    as_is: Evaluation | None = None


@dataclass(frozen=True, slots=True)
class VerifiedCandidate:
    """A candidate measured on the real engine.

    Attributes:
        ident: the candidate's id.
        round: the search round that chose it.
        predicted: its evaluation in that round (and the round).
        model_source: that round's calibration.
        fitted_on_own: the predicting model had seen this candidate's own measurements.
        points: every load measured, in order.
        best: the highest-goodput point that met the SLO (None: none did).
        lower_bound: the SLO still held at the last load measured (goodput at least this).
        gpus: GPUs the candidate uses.
        startup_s: seconds its engine took to start.
        failed: why its measurement stopped, if it did.
        final: the last round's evaluation, when a refit came after its verification.
    """

    ident: str
    round: int
    predicted: tuple[Evaluation, int]
    model_source: str
    fitted_on_own: bool
    points: tuple[LoadBlock, ...]
    best: LoadBlock | None
    lower_bound: bool
    gpus: int
    startup_s: float | None = None
    failed: str | None = None
    final: tuple[Evaluation, int] | None = None

    @property
    def measured_goodput_rps(self) -> float:
        """Request rate at the highest SLO-meeting load measured (0: none met)."""
        return self.best.request_rps if self.best is not None else 0.0

    def error(self) -> float | None:
        """Predicted / measured goodput - 1 (None when nothing met the SLO)."""
        measured = self.measured_goodput_rps
        predicted = self.predicted[0].goodput_rps
        if measured <= 0:
            return None if predicted > 0 else 0.0
        return predicted / measured - 1

    def within(self, bound: float) -> bool:
        """True when the prediction is within `bound` of the measurement."""
        error = self.error()
        return error is not None and abs(error) <= bound


def load_block(result: LoadResult, *, run_dir: str | None = None) -> LoadBlock:
    """A load result as tune.json's block."""
    return LoadBlock(
        load=round(result.load, 6),
        met=result.met,
        violated=list(result.violated),
        request_rps=round(result.request_rps, 6),
        output_tok_s=round(result.output_tok_s, 4),
        per_stream_tok_s=None
        if result.per_stream_tok_s is None
        else round(result.per_stream_tok_s, 4),
        attainment=round(result.attainment, 4),
        requests=result.requests,
        run_dir=run_dir,
    )


def prediction(evaluation: Evaluation, round_: int) -> Prediction:
    """An evaluation as tune.json's block."""
    return Prediction(
        load=None if evaluation.load is None else round(evaluation.load, 6),
        goodput_rps=round(evaluation.goodput_rps, 6),
        goodput_per_gpu=round(evaluation.goodput_per_gpu, 6),
        requests=evaluation.requests,
        capped=evaluation.capped,
        model_round=round_,
    )


def settings_facts(s: Settings) -> dict[str, str | int | float | bool | None]:
    """A candidate's settings by name."""
    return {
        "max_num_seqs": s.max_num_seqs,
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "speculative": s.speculation.label(),
        "gpu_memory_utilization": s.gpu_memory_utilization,
        "estimate_cudagraphs": s.estimate_cudagraphs,
        "tensor_parallel_size": s.tensor_parallel_size,
        "data_parallel_size": s.data_parallel_size,
        "enable_prefix_caching": s.enable_prefix_caching,
        "enable_chunked_prefill": s.enable_chunked_prefill,
        "max_model_len": s.max_model_len,
    }


def _candidate_block(c: Candidate, result: SearchResult | None, round_: int) -> CandidateBlock:
    f = c.feasibility
    scored = result.scores.get(c.ident) if result is not None else None
    pp = f.profile.serve_args.pipeline_parallel_size or 1 if f.profile is not None else 1
    return CandidateBlock(
        id=c.ident,
        label=c.settings.label(),
        settings=settings_facts(c.settings),
        gpus=c.settings.gpus * pp,
        feasible=f.feasible,
        reason=f.reason,
        oom_risk=f.oom_risk,
        kv_cache_tokens=f.kv_cache_tokens,
        max_concurrency_at_max_model_len=round(f.max_concurrency, 4),
        changes=c.changes,
        prediction=prediction(scored.evaluation, round_) if scored is not None else None,
        rung=scored.rung if scored is not None else None,
    )


def _finalist_block(f: Finalist, rank: int) -> FinalistBlock:
    return FinalistBlock(
        id=f.candidate.ident,
        rank=rank,
        note=f.note,
        ladder=[load_block(r) for r in f.ladder],
        ladder_tok_s_per_gpu=round(f.ladder_tok_s_per_gpu, 4),
    )


def _verification(v: VerifiedCandidate, bound: float) -> Verification:
    error = v.error()
    return Verification(
        id=v.ident,
        round=v.round,
        predicted=prediction(*v.predicted),
        measured_load=v.best.load if v.best is not None else None,
        measured_goodput_rps=round(v.measured_goodput_rps, 6),
        measured_goodput_per_gpu=round(v.measured_goodput_rps / v.gpus, 6),
        lower_bound=v.lower_bound,
        points=list(v.points),
        error=None if error is None else round(error, 4),
        within_bound=v.within(bound),
        fitted_on_own=v.fitted_on_own,
        final_prediction=prediction(*v.final) if v.final is not None else None,
        startup_s=None if v.startup_s is None else round(v.startup_s, 1),
        status="failed" if v.failed and not v.points else "measured",
        detail=v.failed,
    )


def choose_winner(
    finalists: Sequence[Finalist], verified: Sequence[VerifiedCandidate]
) -> tuple[Finalist | None, str]:
    """The measured best of the verified candidates among `finalists`, else the predicted
    best (the input profile as it is, measured beside them, is not a finalist unless the
    search made it one)."""
    eligible = {f.candidate.ident for f in finalists}
    measured = [v for v in verified if v.best is not None and v.ident in eligible]
    if measured:
        best = max(measured, key=lambda v: (v.measured_goodput_rps / v.gpus, -v.round))
        for f in finalists:
            if f.candidate.ident == best.ident:
                return f, "measured"
    return (finalists[0] if finalists else None), "predicted"


def tune_document(
    *,
    version: str,
    started_at: str,
    profile: Profile,
    slo: Slo,
    workload: TuneWorkload,
    facts: dict[str, str | int | float | None],
    space: Space,
    pool: Sequence[Candidate],
    rounds: Sequence[SearchRound],
    model_rounds: Sequence[dict[str, object]],
    verified: Sequence[VerifiedCandidate],
    bound: float,
    profile_file: str,
    elapsed_s: float,
    as_is: Baseline | None = None,
) -> tuple[TuneDocument, Finalist | None]:
    """tune.json's document, and the winning finalist (set against `as_is`, the input
    profile as it is, when given)."""
    last = rounds[-1] if rounds else None
    result = last.result if last is not None else None
    finalists = list(result.finalists) if result is not None else []
    by_id = {f.candidate.ident: f for r in rounds for f in r.result.finalists}
    winner_final, chosen_by = choose_winner(
        [by_id[v.ident] for v in verified if v.ident in by_id] or finalists, verified
    )
    if winner_final is not None and chosen_by == "predicted":
        winner_final = finalists[0] if finalists else winner_final
    winner = None
    if winner_final is not None:
        winner = _winner(winner_final, chosen_by, profile, profile_file, verified)
    doc = TuneDocument(
        schema_version=TUNE_VERSION,
        servekit_version=version,
        started_at=started_at,
        profile=profile.name,
        slo=slo.text(),
        workload=facts,
        load_unit=workload.load_unit,
        space={k: [_value_text(v) for v in vs] for k, vs in space.dimensions().items()},
        candidates_total=len(pool),
        feasible=sum(1 for c in pool if c.feasibility.feasible),
        model_rounds=[ModelRound.model_validate(m) for m in model_rounds],
        searches=[
            SearchBlock(
                round=r.round,
                rungs=[
                    RungBlock(requests=g.requests, evaluated=g.evaluated, kept=g.kept)
                    for g in r.result.rungs
                ],
                simulated=r.result.simulated,
                reused=r.result.reused,
                wall_s=round(r.wall_s, 3),
                ranking=[f.candidate.ident for f in r.result.finalists],
                speculation=r.result.speculation,
            )
            for r in rounds
        ],
        candidates=[
            _candidate_block(c, result, last.round if last else 0)
            for c in [*pool, *_derived(pool, rounds)]
        ],
        finalists=[_finalist_block(f, i) for i, f in enumerate(finalists, start=1)],
        pareto=[
            ParetoPoint(
                id=i,
                load=round(load, 6),
                per_stream_tok_s=round(ps, 4),
                output_tok_s_per_gpu=round(tps, 4),
            )
            for i, load, ps, tps in (result.pareto if result is not None else ())
        ],
        verification=[_verification(v, bound) for v in verified],
        verify_bound=bound,
        winner=winner,
        **({"as_is": _as_is(as_is, winner, rounds, verified)} if as_is is not None else {}),
        verdict=[],
    )
    lines = verdict_lines(doc, workload, elapsed_s)
    return doc.model_copy(update={"verdict": lines}), winner_final


def _derived(pool: Sequence[Candidate], rounds: Sequence[SearchRound]) -> list[Candidate]:
    """Finalists the search made up (speculation schedules), which the space did not hold."""
    known = {c.ident for c in pool}
    extra: dict[str, Candidate] = {}
    for r in rounds:
        for f in r.result.finalists:
            if f.candidate.ident not in known:
                extra.setdefault(f.candidate.ident, f.candidate)
    return list(extra.values())


def _value_text(value: object) -> str:
    label = getattr(value, "label", None)
    if callable(label):
        return str(label())
    if isinstance(value, tuple) and len(value) == 2:
        return f"{value[0]}x{value[1]}"
    return str(value)


def _winner(
    f: Finalist,
    chosen_by: str,
    profile: Profile,
    profile_file: str,
    verified: Sequence[VerifiedCandidate],
) -> Winner:
    c = f.candidate
    variant = c.feasibility.profile
    assert variant is not None
    measured = next((v for v in verified if v.ident == c.ident and v.best is not None), None)
    goodput = (
        measured.measured_goodput_rps / measured.gpus
        if measured is not None and chosen_by == "measured"
        else f.scored.evaluation.goodput_per_gpu
    )
    load = (
        measured.best.load
        if measured is not None and measured.best is not None and chosen_by == "measured"
        else f.scored.evaluation.load
    )
    tuned = variant.model_copy(update={"name": profile_file.removesuffix(".yaml")})
    return Winner(
        id=c.ident,
        label=c.settings.label(),
        chosen_by=chosen_by,
        profile_file=profile_file,
        profile_name=tuned.name,
        launch_command=render(tuned, "vllm").strip(),
        max_num_seqs=c.settings.max_num_seqs,
        speculation=_speculation_text(c.settings),
        goodput_per_gpu=round(goodput, 6),
        load=None if load is None else round(load, 6),
        kv=KvHeadroom(
            kv_cache_tokens=c.feasibility.kv_cache_tokens,
            max_model_len=c.settings.max_model_len,
            requests_at_max_model_len=round(c.feasibility.max_concurrency, 4),
        ),
    )


def _measured_per_gpu(v: VerifiedCandidate | None) -> float | None:
    """Measured goodput per GPU (0: no load met the SLO; None: nothing was measured)."""
    if v is None or not v.points:
        return None
    return v.measured_goodput_rps / v.gpus


def _as_is(
    baseline: Baseline,
    winner: Winner | None,
    rounds: Sequence[SearchRound],
    verified: Sequence[VerifiedCandidate],
) -> AsIs:
    """The input profile as it is against the winner: predicted by the calibration that
    predicted the winner last (a refit's, when one came after its verification), measured
    when both were."""
    c = baseline.candidate
    by_id = {v.ident: v for v in verified}
    latest: tuple[Evaluation, int] | None = None  # the winner's latest prediction
    if winner is not None:
        made = [
            (f.scored.evaluation, r.round)
            for r in rounds
            for f in r.result.finalists
            if f.candidate.ident == winner.id
        ]
        if (v := by_id.get(winner.id)) is not None:
            made += [v.predicted, *([v.final] if v.final is not None else [])]
        latest = max(made, key=lambda e: e[1], default=None)
    same = [r for r in rounds if latest is not None and r.round == latest[1]]
    at = same[-1] if same else (rounds[-1] if rounds else None)
    evaluation = at.as_is if at is not None else None
    mine = by_id.get(c.ident)
    best = mine.best if mine is not None else None
    theirs = latest[0].goodput_per_gpu if latest is not None else None
    own = evaluation.goodput_per_gpu if evaluation is not None else None
    measured = _measured_per_gpu(mine)
    theirs_measured = _measured_per_gpu(by_id.get(winner.id)) if winner is not None else None
    return AsIs(
        id=c.ident,
        label=c.settings.label(),
        in_space=baseline.in_space,
        feasible=c.feasibility.feasible,
        reason=c.feasibility.reason,
        predicted=prediction(evaluation, at.round) if evaluation and at else None,
        measured_load=best.load if best is not None else None,
        measured_goodput_per_gpu=None if measured is None else round(measured, 6),
        winner_id=winner.id if winner is not None else None,
        winner_predicted_goodput_per_gpu=None if theirs is None else round(theirs, 6),
        winner_measured_goodput_per_gpu=None
        if theirs_measured is None
        else round(theirs_measured, 6),
        gain_predicted=gain(theirs, own),
        gain_measured=gain(theirs_measured, measured),
    )


def _speculation_text(s: Settings) -> str:
    spec = s.speculation
    if not spec.on:
        return "off"
    if spec.schedule is None:
        return f"on, {spec.k} draft tokens at every batch size"
    schedule = [list(e) for e in spec.schedule]
    return f"{spec.k} draft tokens by batch size: num_speculative_tokens_per_batch_size {schedule}"


def verdict_lines(doc: TuneDocument, workload: TuneWorkload, elapsed_s: float) -> list[str]:
    """The few lines that lead the report: the gain against the profile as it is, SLO and
    load, settings, verification."""
    lines = []
    if doc.as_is is not None:
        lines.append(as_is_line(doc.as_is, workload.load_unit))
    w = doc.winner
    searched = (
        f"searched {doc.candidates_total:,} candidates ({doc.feasible:,} feasible) in "
        f"{sum(s.wall_s for s in doc.searches):.0f} s of simulation"
    )
    if w is None or w.load is None:
        lines.append(f"SLO {doc.slo}: no candidate meets it at any load ({searched})")
        return lines
    how = "measured" if w.chosen_by == "measured" else "predicted"
    lines.append(
        f"SLO {doc.slo}: met up to {w.load:g} {workload.load_unit} by the winner, "
        f"{w.goodput_per_gpu:.4g} req/s per GPU ({how}); {searched}"
    )
    lines.append(f"winner: {w.label}")
    lines.append(f"speculative decoding: {w.speculation}")
    lines.append(
        f"max_num_seqs {w.max_num_seqs}; KV cache {w.kv.kv_cache_tokens:,} tokens per replica: "
        f"{w.kv.requests_at_max_model_len:.2f} requests of max_model_len {w.kv.max_model_len:,}"
    )
    if doc.verification:
        as_is = doc.as_is.id if doc.as_is is not None else None
        errors = ", ".join(
            (f"{v.id} (as-is)" if v.id == as_is else v.id)
            + (f" {v.error:+.1%}" if v.error is not None else " met nowhere")
            for v in doc.verification
        )
        held = sum(1 for v in doc.verification if v.within_bound)
        lines.append(
            f"verified on the engine: {len(doc.verification)} candidate(s), predicted against "
            f"measured goodput {errors}; {held} within {doc.verify_bound:.0%}"
        )
    else:
        lines.append("not verified on the engine (simulation only: --verify N measures the best)")
    lines.append(f"profile: {w.profile_file} (extends {doc.profile})")
    return lines


def winner_profile_text(
    profile: Profile, winner: Finalist, *, extends: str, name: str, slo: Slo, doc: TuneDocument
) -> str:
    """The winner as a profile that extends the input profile (changed settings only)."""
    body = overrides(profile, winner.candidate.settings)
    w = doc.winner
    header = [
        f"# servekit tune of {profile.name} for SLO {slo.text()}",
        f"# winner {winner.candidate.ident} ({w.chosen_by if w else 'predicted'}): "
        f"{winner.candidate.settings.label()}",
    ]
    data = {
        "extends": extends,
        "name": name,
        "description": f"{profile.name} tuned by servekit for {slo.text()}",
        **body,
    }
    return "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False)
