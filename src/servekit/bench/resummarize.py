"""Rebuild a bench run's summary from run.json and records.jsonl (shell).

A run stopped by SIGTERM after this servekit writes its summary itself; one stopped by kill
-9 (or by a SIGTERM to an older servekit) leaves records.jsonl and run.json but no
summary.json. `servekit bench --resummarize DIR` computes every point again from its
records, with the server and client blocks run.json kept for each finished point, so the
summary is the one the live run would have written; a point the run was stopped in is
marked invalid. A torn last records line is skipped (and counted).
"""

from __future__ import annotations

from pathlib import Path

from servekit import jsontext
from servekit.analyze.summarize import Slo, point_metrics, point_to_json
from servekit.analyze.traffic import ScheduleBound, traffic_blocks, with_traffic
from servekit.bench._files import read_json_document
from servekit.bench.spec import PointOutcome, PointSpec
from servekit.bench.store import (
    RECORDS_FILE,
    RUN_INFO_FILE,
    SUMMARY_FILE,
    check_run_dir,
    load_records,
    write_summary,
    write_summary_tables,
)
from servekit.errors import ServekitError
from servekit.records import RequestRecord
from servekit.redaction import Redactor
from servekit.results.run_info import RUN_INFO_VERSION, PlannedPoint, RunInfo, load_run_info
from servekit.results.summary import ClientBlock, ServerBlock, Summary

STOPPED_NOTE = "the run was stopped during this point: rebuilt from its records, it is partial"


def write_run_info(
    run_dir: Path,
    header: Summary,
    points: list[PointSpec],
    outcomes: list[PointOutcome],
    redactor: Redactor | None = None,
    *,
    max_schedule_lag_ms: float | None = None,
) -> None:
    """Write run.json atomically: the summary header, the plan, the finished points, with
    the run's secrets (`redactor`) removed from the server's text they hold; a point with
    an explicit schedule keeps its planned sends and `max_schedule_lag_ms`."""
    done = {o.spec.label: o for o in outcomes}
    planned = []
    for point in points:
        outcome = done.get(point.label)
        entry = PlannedPoint(
            label=point.label, concurrency=point.concurrency, rate_rps=point.rate_rps
        )
        if point.schedule is not None and max_schedule_lag_ms is not None:
            count = point.requests or header.workload.requests_per_point
            entry = entry.model_copy(
                update={
                    "schedule_planned": min(len(point.schedule), count),
                    "max_schedule_lag_ms": max_schedule_lag_ms,
                }
            )
        if outcome is not None:
            client = outcome.client or ClientBlock(
                valid=not outcome.warnings, warnings=outcome.warnings
            )
            entry = entry.model_copy(
                update={"finished": True, "server": outcome.server, "client": client}
            )
        planned.append(entry)
    info = RunInfo(
        schema_version=RUN_INFO_VERSION,
        summary=header.model_copy(update={"points": []}),
        points=planned,
    )
    if redactor is not None:
        info = redactor.redact_document(info)
    path = run_dir / RUN_INFO_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(jsontext.dumps(info.as_json(), indent=2, what=str(path)) + "\n", "utf-8")
    tmp.replace(path)


def rebuild_summary(info: RunInfo, records: list[RequestRecord]) -> Summary:
    """The summary of a run from its run.json and its records (pure).

    Each planned point is computed from the records that carry its label; a finished point
    keeps the server and client blocks the live run measured, an unfinished one with
    records gets an empty server block and an invalid client block that says why.
    """
    by_label: dict[str, list[RequestRecord]] = {}
    for record in records:
        by_label.setdefault(record.point, []).append(record)
    workload = info.summary.workload
    block = workload.slo
    slo = None if block is None else Slo(block.ttft_ms, block.tpot_ms, block.e2e_s)
    agent = None if workload.sessions is None else workload.sessions.agent
    implied = None if workload.trace is None else workload.trace.implied_hit_rate
    points = []
    for planned in info.points:
        recs = by_label.get(planned.label, [])
        if planned.finished:
            server, client = planned.server, planned.client
        elif recs:
            server, client = ServerBlock(), ClientBlock(valid=False, warnings=[STOPPED_NOTE])
        else:
            continue
        metrics = point_metrics(recs, slo=slo)
        point = point_to_json(
            metrics,
            concurrency=planned.concurrency,
            rate_rps=planned.rate_rps,
            server=server,
            client=client,
        )
        bound = None
        if planned.schedule_planned is not None and planned.max_schedule_lag_ms is not None:
            bound = ScheduleBound(planned.schedule_planned, planned.max_schedule_lag_ms)
        blocks = traffic_blocks(
            recs,
            server or ServerBlock(),
            duration_s=metrics.duration_s,
            agent=agent,
            schedule=bound,
            implied_hit_rate=implied if bound is not None else None,
        )
        points.append(with_traffic(point, blocks))
    return info.summary.model_copy(update={"points": points})


def resummarize(run_dir: Path, *, force: bool = False) -> tuple[Summary, int]:
    """Rebuild DIR/summary.json (and .csv, .md) from run.json and records.jsonl.

    Returns the summary and how many torn last records lines were skipped.

    Raises:
        ServekitError: DIR already has a summary and `force` is off; run.json or
            records.jsonl is missing or invalid.
    """
    if not run_dir.is_dir():
        raise ServekitError(
            f"{run_dir} is not a run directory", fix="pass the --out DIR of servekit bench"
        )
    check_run_dir(run_dir, (SUMMARY_FILE,), force=force)  # .csv and .md are its tables
    info_path = run_dir / RUN_INFO_FILE
    if not info_path.exists():
        raise ServekitError(
            f"{run_dir} has no {RUN_INFO_FILE}, which servekit bench writes as a run starts "
            "(the run is older, or not a bench run)",
            fix="run the sweep again with this servekit",
        )
    if not (run_dir / RECORDS_FILE).exists():
        raise ServekitError(
            f"{run_dir} has no {RECORDS_FILE}", fix="pass the --out DIR of servekit bench"
        )
    doc = read_json_document(info_path, fix="pass the --out DIR of servekit bench")
    info = load_run_info(doc, where=str(info_path))
    read = load_records(run_dir)
    summary = rebuild_summary(info, read.records)
    write_summary(run_dir, summary)
    write_summary_tables(run_dir, summary)
    return summary, read.dropped
