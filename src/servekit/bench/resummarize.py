"""Rebuild a bench run's summary from run.json and records.jsonl, or records alone (shell).

A run stopped by SIGTERM after this servekit writes its summary itself; one stopped by kill
-9 (or by a SIGTERM to an older servekit) leaves records.jsonl and run.json but no
summary.json. `servekit bench --resummarize DIR` computes every point again from its
records, with the server and client blocks run.json kept for each finished point, so the
summary is the one the live run would have written; a point the run was stopped in is
marked invalid. A torn last records line is skipped (and counted).

Without run.json (an older servekit, a copied records.jsonl) the summary is built from the
records alone: each point's load from its label (`c=4`, `rate=2`, `trace`), its figures from
its records, and the summary's `unknown` lists what records do not carry (the server, the
sampling, the client's self-check); the last point is marked as possibly partial.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from servekit import __version__, jsontext
from servekit.analyze.slo import slo_of_block
from servekit.analyze.summarize import point_metrics, point_to_json, summary_document
from servekit.analyze.traffic import ScheduleBound, traffic_blocks, with_traffic
from servekit.bench.files import read_json_document
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
from servekit.results.summary import ClientBlock, ServerBlock, Summary, Target, Workload

STOPPED_NOTE = "the run was stopped during this point: rebuilt from its records, it is partial"
RECORDS_ONLY_NOTE = (
    "rebuilt from records.jsonl alone (no run.json): the server's /metrics figures and the "
    "client's self-check (event-loop lag, CPU) were not kept"
)
LAST_POINT_NOTE = (
    "the run's last point, rebuilt from records alone: the run may have been stopped during "
    "it, so it may be partial"
)


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
        sends = point.planned_sends(header.workload.requests_per_point)
        if sends is not None and max_schedule_lag_ms is not None:
            entry = entry.model_copy(
                update={"schedule_planned": sends, "max_schedule_lag_ms": max_schedule_lag_ms}
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
    slo = None if block is None else slo_of_block(block)
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


RECORDS_ONLY_UNKNOWN = (
    "started_at (when the run began)",
    "the target (URL, model, server version, profile)",
    "the workload's api, temperature, seed, warmup, SLO and request options "
    "(input_len and output_len are the records' mean prompt and output tokens, "
    "requests_per_point the largest point's record count)",
    "each point's server block (/metrics) and the client's self-check",
)
"""What a summary rebuilt from records alone cannot know (each point adds its own)."""


def point_load(label: str, records: list[RequestRecord]) -> tuple[int | None, float | None]:
    """A point's concurrency or rate from the label bench gave it (`c=4`, `rate=2`,
    `rate=inf`); a replay (`trace`) gets its records' mean send rate; (None, None) for a
    label of another form."""
    kind, _, value = label.partition("=")
    if kind == "c" and value.isdigit() and int(value) > 0:
        return int(value), None
    if kind == "rate":
        try:
            rate = float(value)
        except ValueError:
            return None, None
        return (None, rate) if rate > 0 and not math.isnan(rate) else (None, None)
    if label == "trace" and records:
        sends = [r.scheduled_ns for r in records]
        span_s = (max(sends) - min(sends)) / 1e9
        return None, len(records) / span_s if span_s > 0 else float(len(records))
    return None, None


def summary_from_records(records: list[RequestRecord]) -> Summary:
    """The summary of a run from its records alone, without run.json (pure).

    Points come in the order their first record was written; every point notes that its
    server block and the client's self-check were not kept, and the last one is invalid
    (a run that wrote no summary was most likely stopped during it). `Summary.unknown`
    lists what the records could not tell.
    """
    by_label: dict[str, list[RequestRecord]] = {}
    for record in records:
        by_label.setdefault(record.point, []).append(record)
    unknown = list(RECORDS_ONLY_UNKNOWN)
    points = []
    for index, (label, recs) in enumerate(by_label.items()):
        concurrency, rate = point_load(label, recs)
        if label == "trace":
            unknown.append("point trace: its schedule (its rate is its records' mean send rate)")
        elif concurrency is None and rate is None:
            unknown.append(f"point {label}: its load (the label is not c=N, rate=R or trace)")
        last = index == len(by_label) - 1
        warnings = [RECORDS_ONLY_NOTE, LAST_POINT_NOTE] if last else [RECORDS_ONLY_NOTE]
        metrics = point_metrics(recs)
        point = point_to_json(
            metrics,
            concurrency=concurrency,
            rate_rps=rate,
            server=ServerBlock(),
            client=ClientBlock(valid=not last, warnings=warnings),
        )
        blocks = traffic_blocks(recs, ServerBlock(), duration_s=metrics.duration_s)
        points.append(with_traffic(point, blocks))
    ok = [r for r in records if r.ok] or records
    return summary_document(
        servekit_version=__version__,
        started_at="unknown",
        target=Target(url=None, model=None, server_version=None, profile=None),
        workload=Workload(
            input_len=round(statistics.fmean(r.prompt_tokens for r in ok)) if ok else 0,
            input_len_method="the records' mean prompt_tokens (the run's setting was not kept)",
            output_len=round(statistics.fmean(r.output_tokens for r in ok)) if ok else 0,
            temperature=None,
            requests_per_point=max((len(v) for v in by_label.values()), default=0),
            seed=None,
        ),
        points=points,
    ).model_copy(update={"unknown": unknown})


def resummarize(run_dir: Path, *, force: bool = False) -> tuple[Summary, int]:
    """Rebuild DIR/summary.json (and .csv, .md) from run.json and records.jsonl, or from
    records.jsonl alone when there is no run.json (`Summary.unknown` then says what the
    records could not tell).

    Returns the summary and how many torn last records lines were skipped.

    Raises:
        ServekitError: DIR already has a summary and `force` is off; records.jsonl is
            missing or invalid, or run.json is invalid.
    """
    if not run_dir.is_dir():
        raise ServekitError(
            f"{run_dir} is not a run directory", fix="pass the --out DIR of servekit bench"
        )
    check_run_dir(run_dir, (SUMMARY_FILE,), force=force)  # .csv and .md are its tables
    if not (run_dir / RECORDS_FILE).exists():
        raise ServekitError(
            f"{run_dir} has no {RECORDS_FILE}", fix="pass the --out DIR of servekit bench"
        )
    info_path = run_dir / RUN_INFO_FILE
    info = None
    if info_path.exists() or info_path.is_symlink():
        doc = read_json_document(info_path, fix="pass the --out DIR of servekit bench")
        info = load_run_info(doc, where=str(info_path))
    read = load_records(run_dir)
    if info is None:
        summary = summary_from_records(read.records)
    else:
        summary = rebuild_summary(info, read.records)
    write_summary(run_dir, summary)
    write_summary_tables(run_dir, summary)
    return summary, read.dropped
