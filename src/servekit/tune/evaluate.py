"""Simulate a candidate and find its highest load that meets the SLO (core).

`Simulator.run` simulates one replica of a candidate at one load level on a fresh engine
(the profile variant's planned KV pool, the calibrated step coefficients and acceptance)
and judges the point; `Simulator.search` finds the candidate's SLO-meeting load by
doubling then bisection: a closed loop's concurrency per replica in whole numbers up to
max_num_seqs (past it a closed loop only queues: no more requests run at once), an open
loop's rate (or a trace's speed factor) geometrically between 1/64 of the replica's
saturated request rate and that rate, to `RATE_PRECISION`. Goodput is the request rate
served at that load, all replicas together; per GPU it is divided by the GPUs the
candidate uses. Simulations are memoized: candidates that differ only in what the
engine never felt (a larger KV pool that never ran short) share one run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from servekit.analyze.slo import Slo
from servekit.analyze.summarize import point_metrics
from servekit.profiles.schema import Profile
from servekit.records import RequestRecord
from servekit.sim.build import build_engine
from servekit.sim.engine import Engine
from servekit.sim.offline import run_point
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.tune.space import Settings
from servekit.tune.workload import TuneWorkload
from servekit.workload.traces import replay_rate

RATE_PRECISION = 0.05
"""An open loop's SLO-meeting rate is found within this fraction."""
RATE_RANGE = 64.0
"""The lowest rate tried is the saturated rate over this."""


@dataclass(frozen=True, slots=True)
class SimModel:
    """The simulator's calibration for a search: step coefficients and acceptance.

    Attributes:
        step: step-time coefficients.
        acceptance: per-position acceptance (None: the profile's or the default).
        source: where they came from ("profile", "calibrated on 2 points", ...).
    """

    step: StepTimeParams
    acceptance: AcceptanceParams | None
    source: str


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica of a candidate as the simulator runs it."""

    settings: Settings
    profile: Profile
    num_gpu_blocks: int

    @property
    def gpus(self) -> int:
        """GPUs of the whole candidate (all replicas)."""
        pp = self.profile.serve_args.pipeline_parallel_size or 1
        return self.settings.gpus * pp


@dataclass(frozen=True, slots=True)
class LoadResult:
    """One simulated (or measured) load level of a candidate, all replicas together.

    Attributes:
        load: the load level (concurrency, rate or trace speed) over all replicas.
        met: every SLO bound holds and no request failed.
        violated: the bounds that do not hold (and failures), as text.
        observed: each SLO bound's observed value (ms, or tok/s for per_stream).
        request_rps: completed requests per second.
        output_tok_s: output tokens per second.
        per_stream_tok_s: median per-stream speed (1 / TPOT), tok/s.
        attainment: fraction of requests within every bound on their own.
        requests: requests simulated per replica.
        failed: requests that failed (refused, over max_model_len).
        duration_s: the point's length (first send to last end).
    """

    load: float
    met: bool
    violated: tuple[str, ...]
    observed: tuple[float | None, ...]
    request_rps: float
    output_tok_s: float
    per_stream_tok_s: float | None
    attainment: float
    requests: int
    failed: int = 0
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A candidate's SLO-meeting load and goodput at one fidelity.

    Attributes:
        load: the highest load level found to meet the SLO, or None (not even the lowest).
        goodput_rps: request rate at that load (0 when none).
        goodput_per_gpu: goodput_rps over the candidate's GPUs.
        at: the point at that load.
        tried: every load level simulated, in the order tried.
        requests: requests per point (the fidelity).
        capped: the load reached its ceiling while still meeting the SLO (max_num_seqs for
            a closed loop, the saturated rate for an open one).
    """

    load: float | None
    goodput_rps: float
    goodput_per_gpu: float
    at: LoadResult | None
    tried: tuple[LoadResult, ...]
    requests: int
    capped: bool = False


def judge_records(
    records: list[RequestRecord], slo: Slo, *, load: float, replicas: int, requests: int
) -> LoadResult:
    """Judge one replica's records against the SLO (figures scaled to all replicas)."""
    metrics = point_metrics(records, ci=False)
    judgement = slo.judge(metrics)
    violated = list(judgement.violated)
    if metrics.failed:
        violated.append(f"{metrics.failed} requests failed")
    ok = [r for r in records if r.ok]
    within = sum(1 for r in ok if slo.met_by(r))
    return LoadResult(
        load=load,
        met=not violated,
        violated=tuple(violated),
        observed=judgement.observed,
        request_rps=metrics.request_throughput_rps * replicas,
        output_tok_s=metrics.output_throughput_tok_s * replicas,
        per_stream_tok_s=metrics.per_stream_tok_s.p50,
        attainment=within / len(records) if records else 0.0,
        requests=requests,
        failed=metrics.failed,
        duration_s=metrics.duration_s,
    )


@dataclass(slots=True)
class _Memo:
    """Runs of one engine configuration at one load: (KV blocks, result, pool felt)."""

    runs: list[tuple[int, LoadResult, bool]] = field(default_factory=list)


PoolFelt = Callable[[Engine], bool]


def pool_felt(engine: Engine) -> bool:
    """True unless the engine's KV pool never refused a block and never evicted a cached
    one: then a larger pool runs the same steps (allocation is the only place the pool's
    size enters, and a larger pool evicts no sooner)."""
    return engine.stats.kv_short > 0 or engine.pool.evictions > 0


Load = TypeVar("Load", int, float)


def _bisect(
    at: Callable[[Load], LoadResult],
    best: LoadResult,
    low: Load,
    high: Load,
    middle: Callable[[Load, Load], Load],
    close: Callable[[Load, Load], bool],
) -> LoadResult:
    """Bisect between a load that meets the SLO (`low`, result `best`) and one that does not
    (`high`) until `close`; returns the result at the highest load found to meet it."""
    while not close(low, high):
        mid = middle(low, high)
        result = at(mid)
        if result.met:
            best, low = result, mid
        else:
            high = mid
    return best


class Simulator:
    """Simulates candidates under one workload, SLO and calibration; memoizes runs."""

    def __init__(
        self,
        workload: TuneWorkload,
        slo: Slo,
        model: SimModel,
        *,
        seed: int = 0,
        felt: PoolFelt = pool_felt,
    ) -> None:
        self.workload = workload
        self.slo = slo
        self.model = model
        self.seed = seed
        self.felt = felt
        self.simulated = 0  # points actually simulated
        self.reused = 0  # points answered from the memo
        self._memo: dict[tuple[object, ...], _Memo] = {}

    def _key(
        self, workload: TuneWorkload, replica: Replica, load: float, requests: int
    ) -> tuple[object, ...]:
        s = replica.settings
        caching = s.enable_prefix_caching if workload.reuses_prefixes else None
        return (
            workload.kind,
            workload.loop,
            s.max_num_seqs,
            s.max_num_batched_tokens,
            s.speculation,
            s.tensor_parallel_size,
            replica.profile.serve_args.pipeline_parallel_size,
            caching,
            s.enable_chunked_prefill,
            s.max_model_len,
            load,
            requests,
        )

    @staticmethod
    def requests_at(workload: TuneWorkload, load: float, requests: int) -> int:
        """Requests simulated per replica at a load: at least four rounds of a closed loop."""
        if workload.integer_load:
            return max(requests, 4 * round(load))
        return requests

    def run(
        self, replica: Replica, load: float, requests: int, workload: TuneWorkload | None = None
    ) -> LoadResult:
        """Simulate one replica at its share of `load` (all replicas) and judge it (under
        `workload` when given: a saturation probe's closed loop)."""
        work = workload or self.workload
        dp = replica.settings.data_parallel_size
        share = load / dp
        n = self.requests_at(work, share, requests)
        memo = self._memo.setdefault(self._key(work, replica, share, n), _Memo())
        blocks = replica.num_gpu_blocks
        for have, result, felt in memo.runs:
            if have == blocks or (not felt and blocks >= have):
                self.reused += 1
                return result
        engine = build_engine(
            replica.profile,
            seed=self.seed,
            num_gpu_blocks=blocks,
            step_params=self.model.step,
            acceptance=self.model.acceptance,
        )
        point = work.sim_point(share, n)
        run = run_point(engine, point, random.Random(self.seed))
        self.simulated += 1
        result = judge_records(run.records, self.slo, load=load, replicas=dp, requests=n)
        memo.runs.append((blocks, result, self.felt(engine)))
        return result

    def search(self, replica: Replica, requests: int) -> Evaluation:
        """The highest load meeting the SLO, and the goodput there."""
        if self.workload.integer_load:
            return self._search_concurrency(replica, requests)
        return self._search_rate(replica, requests)

    def _evaluation(
        self,
        replica: Replica,
        best: LoadResult | None,
        tried: list[LoadResult],
        requests: int,
        capped: bool,
    ) -> Evaluation:
        goodput = best.request_rps if best is not None else 0.0
        return Evaluation(
            load=best.load if best is not None else None,
            goodput_rps=goodput,
            goodput_per_gpu=goodput / replica.gpus,
            at=best,
            tried=tuple(tried),
            requests=requests,
            capped=capped,
        )

    def _search_concurrency(self, replica: Replica, requests: int) -> Evaluation:
        dp = replica.settings.data_parallel_size
        cap = replica.settings.max_num_seqs
        tried: list[LoadResult] = []

        def at(c: int) -> LoadResult:
            result = self.run(replica, float(c * dp), requests)
            tried.append(result)
            return result

        first = at(1)
        if not first.met:
            return self._evaluation(replica, None, tried, requests, False)
        best, low, high = first, 1, None
        c = 1
        while high is None and c < cap:
            c = min(c * 2, cap)
            result = at(c)
            if result.met:
                best, low = result, c
            else:
                high = c
        if high is None:
            return self._evaluation(replica, best, tried, requests, True)
        best = _bisect(at, best, low, high, lambda a, b: (a + b) // 2, lambda a, b: b - a <= 1)
        return self._evaluation(replica, best, tried, requests, False)

    def saturated_rate(self, replica: Replica, requests: int) -> float:
        """A replica's most requests per second: a closed loop at max_num_seqs of the same
        requests, in the workload's load unit (sessions/s for sessions, the speed factor
        that sends at that rate for a trace)."""
        dp = replica.settings.data_parallel_size
        closed = self.workload.closed_twin()
        full = self.run(replica, float(replica.settings.max_num_seqs * dp), requests, closed)
        rate = full.request_rps / dp
        if self.workload.trace is not None:
            return rate / replay_rate(self.workload.trace)
        if self.workload.sessions is not None:
            return rate / self.workload.sessions_requests()
        return rate

    def _search_rate(self, replica: Replica, requests: int) -> Evaluation:
        dp = replica.settings.data_parallel_size
        top = self.saturated_rate(replica, requests)
        tried: list[LoadResult] = []

        def at(rate: float) -> LoadResult:
            result = self.run(replica, rate * dp, requests)
            tried.append(result)
            return result

        if top <= 0:
            return self._evaluation(replica, None, tried, requests, False)
        highest = at(top)
        if highest.met:
            return self._evaluation(replica, highest, tried, requests, True)
        low_rate = top / RATE_RANGE
        lowest = at(low_rate)
        if not lowest.met:
            return self._evaluation(replica, None, tried, requests, False)
        best = _bisect(
            at,
            lowest,
            low_rate,
            top,
            lambda a, b: math.sqrt(a * b),
            lambda a, b: b / a <= 1 + RATE_PRECISION,
        )
        return self._evaluation(replica, best, tried, requests, False)

    def ladder(self, replica: Replica, requests: int) -> tuple[LoadResult, ...]:
        """The candidate at load levels 1, 2, 4, ... up to max_num_seqs per replica (closed
        loop), or 1/64 .. 1 of its saturated rate (open loop): its whole curve of throughput
        against per-stream speed."""
        dp = replica.settings.data_parallel_size
        if self.workload.integer_load:
            cap = replica.settings.max_num_seqs
            levels = sorted({min(1 << i, cap) for i in range(cap.bit_length() + 1)})
            return tuple(self.run(replica, float(c * dp), requests) for c in levels)
        top = self.saturated_rate(replica, requests)
        return tuple(self.run(replica, top * dp / 2**i, requests) for i in range(6, -1, -1))
