"""A simulated sweep (core): run load points on fresh engines and report server counters.

Each point runs on a fresh engine (as a load test against a freshly started server would
see a warm but empty engine, its prefix cache empty too), seeded from the sweep seed and
the point's index, so the same seed gives the same records whatever else ran before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servekit.analyze.slo import Slo
from servekit.analyze.summarize import point_metrics, point_to_json, summary_document
from servekit.analyze.traffic import ScheduleBound, traffic_blocks, with_traffic
from servekit.results.summary import ServerBlock, SloBlock, Summary, Target, Workload
from servekit.sim.engine import Engine, EngineStats
from servekit.sim.offline import AnyPoint, LoadPoint, PointRun, run_point
from servekit.sim.traffic import SessionsPoint, TracePoint
from servekit.workload.load import point_rng, point_seed

DEFAULT_MAX_SCHEDULE_LAG_MS = 10.0  # bench's --max-schedule-lag-ms default


@dataclass(frozen=True, slots=True)
class SimPointResult:
    """One simulated point: its run and the engine's counters over it."""

    point: AnyPoint
    run: PointRun
    stats: EngineStats

    def server_json(self) -> ServerBlock:
        """The summary's `server` block, as /metrics counter deltas would give it."""
        s = self.stats
        return ServerBlock(
            spec_acceptance_length=(1 + s.accepted_tokens / s.drafts) if s.drafts else None,
            spec_acceptance_rate=(s.accepted_tokens / s.draft_tokens) if s.draft_tokens else None,
            kv_cache_usage_max=round(self.run.kv_usage_max, 4),
            preemptions=s.preemptions,
            running_max=self.run.running_max,
            waiting_max=self.run.waiting_max,
            spec_acceptance_per_position=[round(a / s.drafts, 4) for a in s.accepted_per_position]
            if s.drafts
            else None,
            generation_tokens=s.generation_tokens,
            # as vllm:prefix_cache_queries / _hits count them; a point whose requests carry
            # no token ids (fixed-length synthetic load) looks nothing up and shows none
            prefix_cache_queries=s.prefix_cache_queries if s.prefix_cache_queries else None,
            prefix_cache_hits=s.prefix_cache_hits if s.prefix_cache_queries else None,
            samples=[list(sample) for sample in self.run.samples],
        )


def simulate_sweep(
    new_engine: Callable[[int], Engine], points: Sequence[AnyPoint], *, seed: int
) -> list[SimPointResult]:
    """Run every point on a fresh engine built by `new_engine(point_seed)`; a sessions
    point draws its delays and arrivals from `seed` itself, as bench does."""
    results = []
    for index, point in enumerate(points):
        engine = new_engine(point_seed(seed, index))
        seeded = point
        if isinstance(point, SessionsPoint):
            seeded = dataclasses.replace(point, seed=seed)
        run = run_point(engine, seeded, point_rng(seed, index))  # bench's arrivals too
        results.append(SimPointResult(seeded, run, engine.stats))
    return results


def sweep_summary(
    results: Sequence[SimPointResult],
    *,
    profile_name: str,
    model: str | None,
    version: str,
    started_at: str,
    workload: Workload,
    max_schedule_lag_ms: float = DEFAULT_MAX_SCHEDULE_LAG_MS,
    slo: Slo | None = None,
) -> Summary:
    """The summary.json document of a simulated sweep (same shape as a real run's, with
    the traffic blocks of `analyze.traffic`: prefix cache, turns, sessions, schedule, and
    goodput when an SLO is given)."""
    points = []
    for r in results:
        metrics = point_metrics(r.run.records, slo=slo)
        server = r.server_json()
        point = point_to_json(
            metrics, concurrency=r.point.concurrency, rate_rps=r.point.rate_rps, server=server
        )
        if isinstance(r.point, LoadPoint):  # fixed-length requests: no traffic blocks
            points.append(point)
            continue
        replay = isinstance(r.point, TracePoint)
        blocks = traffic_blocks(
            r.run.records,
            server,
            duration_s=metrics.duration_s,
            agent=r.point.spec.agent is not None if isinstance(r.point, SessionsPoint) else None,
            # every send is on time on the virtual clock; the bound is bench's default
            schedule=ScheduleBound(len(r.run.records), max_schedule_lag_ms) if replay else None,
            implied_hit_rate=workload.trace.implied_hit_rate
            if replay and workload.trace is not None
            else None,
        )
        points.append(with_traffic(point, blocks))
    return summary_document(
        servekit_version=version,
        started_at=started_at,
        target=Target(
            url=None, model=model, server_version=f"servekit-sim {version}", profile=profile_name
        ),
        workload=workload.model_copy(update=_simulated(slo)),
        points=points,
    )


def _simulated(slo: Slo | None) -> dict[str, object]:
    """The workload's update for a simulated run (the SLO only when given: a workload
    written without one has no `slo` key)."""
    update: dict[str, object] = {"simulated": True}
    if slo is not None:
        update["slo"] = SloBlock(text=slo.text())
    return update
