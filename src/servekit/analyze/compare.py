"""Compare two runs point by point, and advise on speculative decoding (core).

Points pair by concurrency (closed loop) or rate (open loop); a trace replay's point (it
has a schedule block, or neither a concurrency nor a rate) pairs with the other run's
replay point, whatever rate each was labelled with. For each metric the change is
B relative to A, with a verdict from B's side: `better`, `worse` or `within noise`. A
difference counts when the two 95% bootstrap intervals of the statistic do not overlap;
output throughput has no interval of its own, so in a closed loop (throughput = concurrency x
output tokens / mean latency) it takes the relative width of the mean latency's interval;
a statistic without an interval counts when it moved more than 2%. The traffic figures
(`traffic_figures.TRAFFIC_FIGURES`: prefix-cache hit rates, per-turn TTFT, session
completion, turns per second, invalid tool arguments, schedule lag) are compared where
either point has them, without intervals: a share (kind `rate`) by its difference in
percentage points, which counts beyond 1 point; a time or a count by the 2% rule. The
last-turn TTFT is the highest turn index both points have, named in the delta's `turn`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from servekit.analyze.traffic_figures import TRAFFIC_FIGURES, Kind, last_common_turn
from servekit.profiles.schema import Profile
from servekit.results.compare import (
    COMPARE_VERSION,
    CompareRow,
    Comparison,
    DeltaBlock,
    PerStreamTarget,
    SpeculationAdvice,
    SpeculativeConfig,
    Verdict,
)
from servekit.results.summary import Stat, Summary, SummaryPoint

NOISE_PCT = 2.0
# A share (hit rate, completion, invalid tool arguments) moved when it changed by more than
# this many percentage points: vLLM counts prefix hits in its own blocks, so a run's hit
# rate can differ from what the prompts imply by up to a block per request (about 1 point
# for 16-token blocks of 1,600-token prompts), and a point over a few hundred requests or
# sessions resolves a share no finer than a fraction of a point.
NOISE_PP = 1.0
# Speculation is worth enabling at a load only when it raises throughput by at least this
# much: its draft weights and draft KV cache take GPU memory the target's KV cache could use,
# and the draft adds a failure surface; a gain smaller than this does not pay for that.
MIN_SPEC_GAIN_PCT = 5.0
# Each metric: its key in summary.json, the statistic (None: a plain number), higher is better.
METRICS: tuple[tuple[str, Stat | None, bool], ...] = (
    ("output_throughput_tok_s", None, True),
    ("latency_s", "mean", False),
    ("latency_s", "p50", False),
    ("latency_s", "p99", False),
    ("ttft_ms", "mean", False),
    ("ttft_ms", "p99", False),
    ("tpot_ms", "mean", False),
    ("per_stream_tok_s", "mean", True),
)


@dataclass(frozen=True, slots=True)
class Delta:
    """One metric at one load: A, B, the change and the verdict."""

    metric: str
    a: float | None
    b: float | None
    delta_pct: float | None
    verdict: Verdict
    delta_pp: float | None = None  # a share's change in percentage points
    turn: int | None = None  # the turn index a per-turn figure compares

    def to_block(self) -> DeltaBlock:
        """The compare --json form of this delta."""
        block = DeltaBlock(a=self.a, b=self.b, delta_pct=self.delta_pct, verdict=self.verdict)
        extra = {"delta_pp": self.delta_pp, "turn": self.turn}  # optional keys: set or absent
        return block.model_copy(update={k: v for k, v in extra.items() if v is not None})


Load = tuple[Literal["concurrency", "rate_rps", "trace"], float]


def _load_key(point: SummaryPoint) -> Load | None:
    if point.schedule is not None or (point.concurrency is None and point.rate_rps is None):
        return ("trace", 0.0)
    if point.concurrency is not None:
        return ("concurrency", float(point.concurrency))
    if point.rate_rps is not None:
        return ("rate_rps", float(point.rate_rps))
    return None


def _stat(
    point: SummaryPoint, key: str, stat: Stat | None
) -> tuple[float | None, tuple[float, float] | None]:
    if stat is None:
        return point.figure(key), None
    block = point.distribution(key)
    value = block.stat(stat)
    if value is None:
        return None, None
    return value, block.interval(stat)


def _throughput_ci(point: SummaryPoint, value: float) -> tuple[float, float] | None:
    mean, ci = _stat(point, "latency_s", "mean")
    if not mean or ci is None or point.concurrency is None:
        return None
    # throughput is proportional to 1 / mean latency in a closed loop
    return value * mean / ci[1], value * mean / ci[0]


def delta(
    metric: str,
    pa: SummaryPoint,
    pb: SummaryPoint,
    key: str,
    stat: Stat | None,
    higher_better: bool,
) -> Delta:
    """The change of one metric from point A to point B, with its verdict."""
    a, ca = _stat(pa, key, stat)
    b, cb = _stat(pb, key, stat)
    if a is None or b is None or a == 0:
        return Delta(metric, a, b, None, "n/a")
    if stat is None:
        ca, cb = _throughput_ci(pa, a), _throughput_ci(pb, b)
    pct = (b - a) / abs(a) * 100
    if ca is not None and cb is not None:
        apart = ca[1] < cb[0] or cb[1] < ca[0]
    else:
        apart = abs(pct) > NOISE_PCT
    verdict: Verdict = "better" if (b > a) == higher_better else "worse"
    if not apart:
        verdict = "within noise"
    return Delta(metric, a, b, round(pct, 2), verdict)


def traffic_delta(
    metric: str,
    a: float | None,
    b: float | None,
    higher_better: bool,
    kind: Kind,
    *,
    turn: int | None = None,
) -> Delta:
    """The change of one traffic figure from A to B (no intervals): a share (`rate`) by
    percentage points beyond `NOISE_PP`, a time or count by the relative 2% rule."""
    if a is None or b is None:
        return Delta(metric, a, b, None, "n/a", turn=turn)
    pct = round((b - a) / abs(a) * 100, 2) if a else None
    verdict: Verdict = "better" if (b > a) == higher_better else "worse"
    if kind == "rate":
        pp = round((b - a) * 100, 2)
        if abs(pp) <= NOISE_PP:
            verdict = "within noise"
        return Delta(metric, a, b, pct, verdict, delta_pp=pp, turn=turn)
    if pct is None:  # a time or count from 0 has no relative change
        return Delta(metric, a, b, None, "n/a", turn=turn)
    if abs(pct) <= NOISE_PCT:
        verdict = "within noise"
    return Delta(metric, a, b, pct, verdict, turn=turn)


def untrusted(point: SummaryPoint) -> str | None:
    """Why a point's figures cannot support advice, or None: requests failed (the load the
    server saw was not the load asked for), or the client's own timing was not valid."""
    if point.failed:
        return f"{point.failed} of {point.completed + point.failed} requests failed"
    if not point.client.valid:
        reason = point.client.warnings[0] if point.client.warnings else "no reason given"
        return f"client timing not valid ({reason})"
    return None


def _excluded(pa: SummaryPoint, pb: SummaryPoint) -> str | None:
    reasons = [f"{run}: {why}" for run, p in (("A", pa), ("B", pb)) if (why := untrusted(p))]
    return "; ".join(reasons) or None


def pair_points(run_a: Summary, run_b: Summary) -> list[tuple[Load, SummaryPoint, SummaryPoint]]:
    """Points present in both runs, by load, lowest load first."""
    index_b = {k: p for p in run_b.points if (k := _load_key(p)) is not None}
    pairs = [
        (k, p, index_b[k]) for p in run_a.points if (k := _load_key(p)) is not None and k in index_b
    ]
    return sorted(pairs, key=lambda item: (item[0][0], item[0][1]))


def _replay_requests(point: SummaryPoint) -> float:
    """A replay row's load value: the requests A's replay planned (or sent), at least 1."""
    planned = point.schedule.planned if point.schedule else point.completed + point.failed
    return float(max(planned, 1))


def _label(load: Load) -> str:
    kind, value = load
    if kind == "trace":
        return "trace"
    return f"c={value:g}" if kind == "concurrency" else f"rate={value:g}"


def crossover(rows: list[CompareRow]) -> str | None:
    """Where B's throughput verdict against A turns from better to worse (or back)."""
    verdicts = [
        (r.load, r.deltas["output_throughput_tok_s"].verdict) for r in rows if r.excluded is None
    ]
    signed = [(load, v) for load, v in verdicts if v in ("better", "worse")]
    for (load_1, v1), (load_2, v2) in itertools.pairwise(signed):
        if v1 != v2:
            return f"between {load_1} and {load_2}: B is {v1} below, {v2} above"
    return None


def highest_meeting(run: Summary, target: float) -> int | None:
    """The highest concurrency whose mean per-stream speed meets `target` tok/s."""
    best = None
    for point in run.points:
        speed = point.per_stream_tok_s.mean
        trusted = untrusted(point) is None
        if point.concurrency is not None and speed is not None and speed >= target and trusted:
            best = max(best or 0, point.concurrency)
    return best


def has_speculation(run: Summary) -> bool:
    """Whether any point of the run saw speculative-decoding acceptance on the server."""
    return any(p.server.spec_acceptance_length for p in run.points)


def speculation_advice(
    rows: list[CompareRow],
    spec_is_b: bool,
    name: str,
    k: int | None,
    max_batch: int,
    min_gain_pct: float = MIN_SPEC_GAIN_PCT,
) -> SpeculationAdvice:
    """When speculation pays: the highest load up to which the speculative run's throughput
    is better beyond noise and by at least `min_gain_pct` at every load, what it gains or
    costs above that, and the vLLM setting that enacts it."""
    gains: list[tuple[float, bool, float]] = []  # (load, pays, % gain of spec over plain)
    for row in rows:
        d = row.deltas["output_throughput_tok_s"]
        if d.a is None or d.b is None or row.excluded is not None:
            continue
        spec, plain = (d.b, d.a) if spec_is_b else (d.a, d.b)
        gain = (spec - plain) / plain * 100 if plain else 0.0
        beyond_noise = d.verdict != "within noise"
        gains.append((row.load_value, beyond_noise and gain >= min_gain_pct, gain))
    enable_upto = None
    for value, pays, _ in gains:
        if not pays:
            break
        enable_upto = value
    above = [g for value, _, g in gains if enable_upto is None or value > enable_upto]
    setting = None
    if not gains:
        text = f"no advice on {name}: no load has points both runs measured without failures"
    elif enable_upto is None:
        text = (
            f"disable {name}: it does not raise throughput by {min_gain_pct:g}% "
            "at any measured load"
        )
    elif not above:
        text = (
            f"keep {name} on: it helps at every measured load (up to concurrency {gains[-1][0]:g})"
        )
    else:
        beyond = _above(above, min_gain_pct)
        text = f"enable {name} at concurrency <= {enable_upto:g}; above that {beyond}"
        upto = int(enable_upto)
        setting = SpeculativeConfig(
            num_speculative_tokens_per_batch_size=[
                (1, upto, k or 1),
                (upto + 1, max(max_batch, upto + 1), 0),
            ],
            note="vLLM's dynamic speculative decoding (in speculative_config, on V1 engines "
            "that have it); disable_by_batch_size has had no effect since v0.10.0 and was "
            "removed (vLLM PR #35060)",
        )
    if skipped := [row.load for row in rows if row.excluded is not None]:
        text += f" (not judged at {', '.join(skipped)}: failed requests or invalid timing)"
    return SpeculationAdvice(
        run="B" if spec_is_b else "A",
        recommendation=text,
        enable_up_to_concurrency=enable_upto,
        min_gain_pct=min_gain_pct,
        gains_pct=[(value, round(g, 2)) for value, _, g in gains],
        speculative_config=setting,
    )


def _above(gains: list[float], min_gain_pct: float) -> str:
    """What speculation does above the recommended load, in words."""
    costs = [-g for g in gains if g < 0]
    small = [g for g in gains if g >= 0]
    cost = ""
    if costs:
        low, high = min(costs), max(costs)
        cost = (
            f"{low:.0f}-{high:.0f}%"
            if len(costs) > 1 and round(low) != round(high)
            else f"{high:.0f}%"
        )
    if not small:
        return f"it costs {cost} throughput"
    gain = (
        f"it gains at most {max(small):.1f}% "
        f"(under the {min_gain_pct:g}% that pays for the draft's memory)"
    )
    return f"{gain} or costs {cost} throughput" if costs else gain


def speculation_facts(profiles: Iterable[Profile | None]) -> tuple[str, int, int | None]:
    """The speculative method's display name, max_num_seqs and num_speculative_tokens from
    the runs' profiles (generic values where no profile is known)."""
    name, max_batch, k = "speculative decoding", 4096, None
    for prof in profiles:
        if prof is None:
            continue
        if prof.serve_args.max_num_seqs:
            max_batch = prof.serve_args.max_num_seqs
        if prof.speculative is not None:
            name = prof.speculative.config.method.upper().replace("_", " ")
            k = prof.speculative.config.num_speculative_tokens
    return name, max_batch, k


def compare_runs(
    run_a: Summary,
    run_b: Summary,
    *,
    per_stream_target: float | None = None,
    spec_name: str = "speculative decoding",
    max_batch: int = 4096,
    spec_tokens: int | None = None,
) -> Comparison:
    """The whole comparison document of `servekit compare`."""
    rows = []
    for load, pa, pb in pair_points(run_a, run_b):
        deltas = {}
        for key, stat, higher in METRICS:
            name = key if stat is None else f"{key}.{stat}"
            deltas[name] = delta(name, pa, pb, key, stat, higher).to_block()
        common = last_common_turn(pa, pb)
        for f in TRAFFIC_FIGURES:
            turn = common if f.per_turn else None  # None: no turn both points have
            a, b = f.get(pa, turn), f.get(pb, turn)
            if a is not None or b is not None:
                deltas[f.name] = traffic_delta(f.name, a, b, f.higher_better, f.kind,
                                               turn=turn).to_block()  # fmt: skip
        value = load[1] if load[0] != "trace" else _replay_requests(pa)
        rows.append(CompareRow(load=_label(load), load_kind=load[0], load_value=value,
                               deltas=deltas, excluded=_excluded(pa, pb)))  # fmt: skip
    doc = Comparison(schema_version=COMPARE_VERSION, points=rows, crossover=crossover(rows))
    spec_a, spec_b = has_speculation(run_a), has_speculation(run_b)
    if spec_a != spec_b and rows and rows[0].load_kind == "concurrency":
        spec_run = run_b if spec_b else run_a
        per_pos = next(
            (
                p.server.spec_acceptance_per_position
                for p in spec_run.points
                if p.server.spec_acceptance_per_position
            ),
            None,
        )
        k = spec_tokens or (len(per_pos) if per_pos is not None else None)
        advice = speculation_advice(rows, spec_b, spec_name, k, max_batch)
        doc = doc.model_copy(update={"speculation": advice})
    if per_stream_target is not None:
        target = PerStreamTarget(
            tok_s=per_stream_target,
            A=highest_meeting(run_a, per_stream_target),
            B=highest_meeting(run_b, per_stream_target),
        )
        doc = doc.model_copy(update={"per_stream_target": target})
    return doc
