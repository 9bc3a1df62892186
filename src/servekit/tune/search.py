"""The search of `servekit tune` (core): successive halving in the simulator, then finalists.

1. Every feasible candidate is searched (`Simulator.search`) at a low fidelity (few requests
   per point); the best 1/ETA by rank go on to the next rung at ETA times the requests, until
   the last rung runs the workload's full request count. Simulations of candidates the
   engine cannot tell apart are shared (`Simulator`'s memo), so thousands of candidates
   cost what their distinct engine configurations cost.
2. The finalists (the best FINALISTS, and the best candidate of each speculation setting)
   are simulated at every load of their ladder: their curves of throughput per GPU against
   per-stream speed, whose non-dominated points are the Pareto front.
3. When the leader speculates (or not) and its twin with speculation off (or on) beats it
   at some loads, the per-batch-size schedule that follows the better of the two at each
   batch size (vLLM's num_speculative_tokens_per_batch_size: drafts up to the last batch
   size where speculation still gains, none above) is simulated as one more finalist.

The rank: the most goodput per GPU; candidates within TIE of the best are tied, and a tie
goes to the higher throughput over the ladder (within TIE), then to a candidate outside the
planner's OOM risk, then to the fewest settings changed from the profile, then to the most
KV cache, then by label.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servekit.profiles.schema import Profile
from servekit.tune.evaluate import Evaluation, LoadResult, Replica, Simulator
from servekit.tune.feasibility import Feasibility, assess
from servekit.tune.space import Settings, Speculation, on_up_to, profile_speculation

ETA = 4
"""Each rung keeps the best 1/ETA and gives them ETA times the requests."""
MIN_REQUESTS = 16
"""Fewest requests per point on the first rung."""
FINALISTS = 5
"""Candidates simulated over their whole ladder."""
TIE = 0.02
"""Goodputs (and ladder throughputs) within this fraction of the best are a tie. Not the
simulator's seed noise (under 0.3% on the M3 ladder, benchmarks/bench_tune.py) but its
model error: held-out points miss by 6-20% (docs/simulator.md), so a difference of a few
percent between two candidates is not a finding, and the tie goes to the next criterion."""

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate and its feasibility.

    Attributes:
        settings: its settings.
        feasibility: its plan, or why it cannot run.
        changes: how many settings differ from the profile's.
    """

    settings: Settings
    feasibility: Feasibility
    changes: int

    @property
    def ident(self) -> str:
        """The candidate's id."""
        return self.settings.ident()

    def replica(self) -> Replica:
        """The simulator's view of it (feasible candidates only)."""
        f = self.feasibility
        assert f.profile is not None
        assert f.feasible
        return Replica(self.settings, f.profile, f.num_gpu_blocks)


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate's evaluation at a rung's fidelity."""

    candidate: Candidate
    evaluation: Evaluation
    rung: int


@dataclass(frozen=True, slots=True)
class Finalist:
    """A finalist: its full-fidelity evaluation and its ladder.

    Attributes:
        scored: its evaluation at the full request count.
        ladder: its load ladder (throughput against per-stream speed).
        ladder_tok_s_per_gpu: mean output tokens/s per GPU over the ladder.
        note: why it is a finalist when not by rank ("derived schedule", ...).
    """

    scored: Scored
    ladder: tuple[LoadResult, ...]
    ladder_tok_s_per_gpu: float
    note: str | None = None

    @property
    def candidate(self) -> Candidate:
        """The finalist's candidate."""
        return self.scored.candidate


@dataclass(frozen=True, slots=True)
class Rung:
    """One rung of successive halving."""

    requests: int
    evaluated: int
    kept: int


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What the search found.

    Attributes:
        candidates: every candidate with its feasibility, in space order.
        scores: each feasible candidate's last evaluation (its highest rung).
        rungs: the rungs run.
        finalists: the final ranking, best first.
        pareto: the non-dominated ladder points (candidate id, load, per-stream tok/s,
            output tok/s per GPU), by per-stream speed.
        speculation: the speculation finding in words.
        simulated: points simulated; reused: points answered from the memo.
    """

    candidates: tuple[Candidate, ...]
    scores: dict[str, Scored]
    rungs: tuple[Rung, ...]
    finalists: tuple[Finalist, ...]
    pareto: tuple[tuple[str, float, float, float], ...]
    speculation: str | None
    simulated: int
    reused: int


def changed(profile: Profile, settings: Settings) -> int:
    """How many of the candidate's settings differ from the profile's."""
    args = profile.serve_args
    now = profile_speculation(profile)
    flag = profile.env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
    pairs = [
        (settings.max_num_seqs, args.max_num_seqs),
        (settings.max_num_batched_tokens, args.max_num_batched_tokens),
        (settings.speculation, now),
        (settings.gpu_memory_utilization, args.gpu_memory_utilization),
        (settings.tensor_parallel_size, args.tensor_parallel_size),
        (settings.data_parallel_size, args.data_parallel_size or 1),
        (settings.enable_prefix_caching, args.enable_prefix_caching is not False),
        (settings.enable_chunked_prefill, args.enable_chunked_prefill is not False),
        (settings.max_model_len, args.max_model_len),
    ]
    n = sum(1 for a, b in pairs if a != b)
    if settings.estimate_cudagraphs is not None and flag is not None:
        n += settings.estimate_cudagraphs != (flag.strip() not in ("0", "false", "False", ""))
    elif settings.estimate_cudagraphs is not None:
        n += settings.estimate_cudagraphs is False
    return n


def candidates(profile: Profile, space: Sequence[Settings]) -> list[Candidate]:
    """Every candidate planned (never raises: a refusal is its reason)."""
    return [Candidate(s, assess(profile, s), changed(profile, s)) for s in space]


def _variant_of(profile: Profile, settings: Settings) -> Profile:
    from servekit.tune.space import variant

    return variant(profile, settings)


def _bucket(value: float, best: float) -> int:
    """0 within TIE of the best, 1 within the next TIE, ... (larger is better)."""
    if best <= 0:
        return 0
    return math.floor(max(best - value, 0.0) / best / TIE)


def rank(scored: Sequence[Scored]) -> list[Scored]:
    """Order by goodput per GPU (ties within TIE), then outside OOM risk, fewest changes,
    most KV cache, label."""
    best = max((s.evaluation.goodput_per_gpu for s in scored), default=0.0)
    return sorted(
        scored,
        key=lambda s: (
            _bucket(s.evaluation.goodput_per_gpu, best),
            -s.evaluation.goodput_per_gpu if _bucket(s.evaluation.goodput_per_gpu, best) else 0,
            s.candidate.feasibility.oom_risk is not None,
            s.candidate.changes,
            -s.candidate.feasibility.kv_cache_tokens,
            s.candidate.settings.label(),
        ),
    )


def rank_finalists(finalists: Sequence[Finalist]) -> list[Finalist]:
    """The final order: goodput per GPU (ties within TIE), then ladder throughput per GPU
    (ties within TIE), then outside OOM risk, fewest changes, most KV cache, label."""
    best = max((f.scored.evaluation.goodput_per_gpu for f in finalists), default=0.0)
    best_ladder = max((f.ladder_tok_s_per_gpu for f in finalists), default=0.0)

    def key(f: Finalist) -> tuple[object, ...]:
        g = f.scored.evaluation.goodput_per_gpu
        gb = _bucket(g, best)
        return (
            gb,
            -g if gb else 0,
            _bucket(f.ladder_tok_s_per_gpu, best_ladder),
            f.candidate.feasibility.oom_risk is not None,
            f.candidate.changes,
            -f.candidate.feasibility.kv_cache_tokens,
            f.candidate.settings.label(),
        )

    return sorted(finalists, key=key)


def rung_requests(full: int, count: int, finalists: int) -> list[int]:
    """Requests per point of each rung: the last at `full`, each earlier ETA times fewer
    (at least MIN_REQUESTS), as many rungs as halving `count` down to ETA x `finalists`
    needs."""
    rungs = 1
    while count > ETA * finalists * ETA ** (rungs - 1) and rungs < 4:
        rungs += 1
    return [max(full // ETA ** (rungs - 1 - r), min(MIN_REQUESTS, full)) for r in range(rungs)]


def successive_halving(
    pool: Sequence[Candidate], sim: Simulator, *, finalists: int, progress: Progress
) -> tuple[dict[str, Scored], list[Rung], list[Scored]]:
    """Search every candidate of `pool` at rising fidelity; returns each one's last
    evaluation, the rungs and the last rung's ranking."""
    full = sim.workload.requests
    fidelities = rung_requests(full, len(pool), finalists)
    # smallest KV pools first: a larger pool reuses a run its smaller twin never felt
    survivors = sorted(pool, key=lambda c: c.feasibility.num_gpu_blocks)
    scores: dict[str, Scored] = {}
    rungs: list[Rung] = []
    ranked: list[Scored] = []
    for index, requests in enumerate(fidelities):
        evaluated = []
        for done, candidate in enumerate(survivors, start=1):
            evaluation = sim.search(candidate.replica(), requests)
            scored = Scored(candidate, evaluation, index)
            scores[candidate.ident] = scored
            evaluated.append(scored)
            progress(
                f"rung {index + 1}/{len(fidelities)} ({requests} requests per point)",
                done,
                len(survivors),
            )
        ranked = rank(evaluated)
        last = index == len(fidelities) - 1
        keep = len(ranked) if last else max(math.ceil(len(ranked) / ETA), finalists)
        rungs.append(Rung(requests, len(evaluated), keep))
        kept = ranked[:keep]
        survivors = sorted((s.candidate for s in kept), key=lambda c: c.feasibility.num_gpu_blocks)
    return scores, rungs, ranked


def finalize(
    profile: Profile,
    ranked: Sequence[Scored],
    pool: Sequence[Candidate],
    sim: Simulator,
    *,
    finalists: int,
    progress: Progress,
) -> tuple[list[Finalist], str | None]:
    """Ladders of the finalists, the derived speculation schedule, the final ranking."""
    full = sim.workload.requests
    # one finalist per engine configuration: candidates that differ only in memory settings
    # (gpu_memory_utilization, the graph estimate, max_model_len) run the same steps unless
    # their KV cache runs short; the best-ranked of them stands for all
    distinct: dict[tuple[object, ...], Scored] = {}
    for s in ranked:
        distinct.setdefault(engine_signature(s.candidate.settings, sim), s)
    representatives = list(distinct.values())
    chosen: dict[str, Scored] = {}
    for s in representatives[:finalists]:
        chosen[s.candidate.ident] = s
    for kind in ("off", "on"):  # the best of each speculation setting, for the front
        best = next(
            (s for s in representatives if s.candidate.settings.speculation.on == (kind == "on")),
            None,
        )
        if best is not None:
            chosen.setdefault(best.candidate.ident, best)
    out: list[Finalist] = []
    for done, s in enumerate(chosen.values(), start=1):
        out.append(_finalist(s, sim, full))
        progress("ladders of the finalists", done, len(chosen))
    out = rank_finalists(out)
    note = None
    by_settings = {c.settings: c for c in pool}
    leader = out[0]
    derived, note = _schedule(profile, leader, by_settings, sim, full)
    have = {f.candidate.ident for f in out}
    if derived := [f for f in derived if f.candidate.ident not in have]:
        out = rank_finalists([*out, *derived])
    return out, note


def engine_signature(settings: Settings, sim: Simulator) -> tuple[object, ...]:
    """What the simulated engine of a candidate depends on besides its KV pool."""
    caching = settings.enable_prefix_caching if sim.workload.reuses_prefixes else None
    return (
        settings.max_num_seqs,
        settings.max_num_batched_tokens,
        settings.speculation,
        settings.tensor_parallel_size,
        settings.data_parallel_size,
        caching,
        settings.enable_chunked_prefill,
    )


def _finalist(scored: Scored, sim: Simulator, full: int, note: str | None = None) -> Finalist:
    replica = scored.candidate.replica()
    evaluation = scored.evaluation
    if evaluation.requests != full:
        evaluation = sim.search(replica, full)
        scored = Scored(scored.candidate, evaluation, scored.rung + 1)
    ladder = sim.ladder(replica, full)
    gpus = replica.gpus
    mean = sum(r.output_tok_s for r in ladder) / len(ladder) / gpus if ladder else 0.0
    return Finalist(scored, ladder, mean, note)


def _schedule(
    profile: Profile,
    leader: Finalist,
    by_settings: dict[Settings, Candidate],
    sim: Simulator,
    full: int,
) -> tuple[list[Finalist], str | None]:
    """The twin of the leader with speculation flipped, and the schedule that takes the
    better of the two at each batch size (as finalists), with the finding in words."""
    settings = leader.candidate.settings
    k_max = profile.speculative.config.num_speculative_tokens if profile.speculative else 0
    if not k_max or settings.speculation.schedule is not None or settings.data_parallel_size > 1:
        return [], None  # vLLM runs no schedule with data parallelism
    spec = settings.speculation
    twin_spec = Speculation() if spec.on else Speculation(k_max)
    twin_settings = dataclasses.replace(settings, speculation=twin_spec)
    twin = by_settings.get(twin_settings)
    if twin is None:
        twin = Candidate(twin_settings, assess(profile, twin_settings), 0)
    if not twin.feasibility.feasible:
        return [], None
    twin_final = _finalist(
        Scored(twin, sim.search(twin.replica(), full), 0),
        sim,
        full,
        note="the leader with speculation flipped",
    )
    on, off = (leader, twin_final) if spec.on else (twin_final, leader)
    k = on.candidate.settings.speculation.k
    dp = settings.data_parallel_size
    upto = None
    for a, b in zip(on.ladder, off.ladder, strict=True):
        if a.output_tok_s > b.output_tok_s * (1 + TIE):
            upto = round(a.load / dp)
        else:
            break
    cap = settings.max_num_seqs
    if upto is None:
        return [twin_final], (
            f"speculation ({k} drafts) does not gain {TIE:.0%} throughput at any load of the "
            "ladder, not even at concurrency 1: off"
        )
    if upto >= cap:
        return [twin_final], f"speculation ({k} drafts) gains at every load up to max_num_seqs"
    schedule_settings = dataclasses.replace(settings, speculation=on_up_to(k, upto, cap))
    scheduled = Candidate(
        schedule_settings,
        dataclasses.replace(
            on.candidate.feasibility, profile=_variant_of(profile, schedule_settings)
        ),
        changed(profile, schedule_settings),
    )
    final = _finalist(
        Scored(scheduled, sim.search(scheduled.replica(), full), 0),
        sim,
        full,
        note=f"derived: speculation up to batch {upto}",
    )
    text = (
        f"speculation ({k} drafts) gains more than {TIE:.0%} throughput up to batch {upto} and "
        f"not above: on up to batch {upto}, off above (num_speculative_tokens_per_batch_size "
        f"{[list(e) for e in final.candidate.settings.speculation.schedule or ()]})"
    )
    return [twin_final, final], text


def pareto(finalists: Sequence[Finalist]) -> list[tuple[str, float, float, float]]:
    """Non-dominated (per-stream speed, throughput per GPU) ladder points of the finalists,
    slowest streams first; ties in a fixed order (by throughput, then id and load), never
    in the order a set's string hashes happen to give."""
    points = []
    for f in finalists:
        gpus = f.candidate.replica().gpus
        for r in f.ladder:
            if r.per_stream_tok_s is not None and not r.failed:
                points.append(
                    (f.candidate.ident, r.load, r.per_stream_tok_s, r.output_tok_s / gpus)
                )
    front = [
        p
        for p in points
        if not any(q[2] >= p[2] and q[3] >= p[3] and (q[2] > p[2] or q[3] > p[3]) for q in points)
    ]
    return sorted(set(front), key=lambda p: (p[2], p[3], p[0], p[1]))


def search(
    profile: Profile,
    space: Sequence[Settings],
    sim: Simulator,
    *,
    finalists: int = FINALISTS,
    progress: Progress = lambda *_: None,
    pool: Sequence[Candidate] | None = None,
) -> SearchResult:
    """Plan every candidate, search the feasible ones, rank the finalists."""
    every = list(pool) if pool is not None else candidates(profile, space)
    feasible = [c for c in every if c.feasibility.feasible]
    if not feasible:
        return SearchResult(tuple(every), {}, (), (), (), None, sim.simulated, sim.reused)
    scores, rungs, ranked = successive_halving(
        feasible, sim, finalists=finalists, progress=progress
    )
    final, note = finalize(profile, ranked, every, sim, finalists=finalists, progress=progress)
    for f in final:
        scores[f.candidate.ident] = f.scored
    return SearchResult(
        tuple(every),
        scores,
        tuple(rungs),
        tuple(final),
        tuple(pareto(final)),
        note,
        sim.simulated,
        sim.reused,
    )
