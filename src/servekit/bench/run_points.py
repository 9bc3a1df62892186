"""Measured points read from run directories (shell): what `sim fit` calibrates from.

A run directory of `servekit bench` or `servekit sim run` holds records.jsonl (one record
per request, labelled with its point) and summary.json (per point the concurrency or rate,
and the server block with the spec-decode counters). Every problem is one ServekitError
line naming the directory and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from servekit.bench.store import RECORDS_FILE, read_records, read_summary
from servekit.errors import ConfigError
from servekit.records import RequestRecord
from servekit.results.summary import Summary, SummaryPoint, Target
from servekit.sim.calibrate import RunPoint

_FIX = "pass run directories written by servekit bench or servekit sim run"


def point_label(point: SummaryPoint) -> str:
    """The label records carry for a summary point ("c=4", "rate=2")."""
    if point.concurrency is not None:
        return f"c={point.concurrency}"
    return f"rate={point.rate_rps:g}"


def arrival_of(summary: Summary) -> str:
    """The open loop's arrival process from bench's command line (poisson when unstated)."""
    command = summary.command or []
    for index, word in enumerate(command):
        if word == "--arrival" and index + 1 < len(command):
            return command[index + 1]
        if word.startswith("--arrival="):
            return word.partition("=")[2]
    return "poisson"


def _read_run(run_dir: Path) -> tuple[Target, list[RunPoint]]:
    if not (run_dir / RECORDS_FILE).is_file():
        raise ConfigError(f"{run_dir} has no {RECORDS_FILE} to fit steps from", fix=_FIX)
    summary = read_summary(run_dir)
    temperature = summary.workload.temperature
    if temperature is None:  # rebuilt from records alone: the sampling is not known
        raise ConfigError(
            f"{run_dir}/summary.json does not say the run's temperature (it was rebuilt from "
            "records.jsonl alone); acceptance depends on it",
            fix="fit runs whose summary servekit bench or sim run wrote (with run.json)",
        )
    by_label: dict[str, list[RequestRecord]] = {}
    for record in read_records(run_dir):
        by_label.setdefault(record.point, []).append(record)
    arrival = arrival_of(summary)
    points = []
    for p in summary.points:
        if p.rate_rps is not None and math.isinf(p.rate_rps):
            continue  # everything at once: no arrival process to reproduce
        label = point_label(p)
        records = tuple(by_label.get(label, ()))
        if not any(r.ok and r.chunk_ns for r in records):
            continue
        points.append(
            RunPoint(label, p.concurrency, p.rate_rps, arrival, temperature,
                     records, p.server, str(run_dir))
        )  # fmt: skip
    if not points:
        raise ConfigError(
            f"{run_dir}: no point has successful requests with chunk times",
            fix="pass a streaming run (servekit bench or sim run) whose requests succeeded",
        )
    return summary.target, points


def read_runs(
    run_dirs: Sequence[Path], holdout_dirs: Sequence[Path] = ()
) -> tuple[list[RunPoint], list[RunPoint]]:
    """The points of the training and held-out run directories, all of one deployment.

    Raises:
        ServekitError: a directory is unusable, or the runs name different profiles or models.
    """
    targets: dict[tuple[str | None, str | None], Path] = {}
    groups: tuple[list[RunPoint], list[RunPoint]] = ([], [])
    for group, dirs in zip(groups, (run_dirs, holdout_dirs), strict=True):
        for run_dir in dirs:
            target, points = _read_run(run_dir)
            targets.setdefault((target.profile, target.model), run_dir)
            group += points
    if len(targets) > 1:
        (a, da), (b, db) = list(targets.items())[:2]
        raise ConfigError(
            f"{da} measured profile {a[0]} model {a[1]} but {db} measured profile {b[0]} "
            f"model {b[1]}: a fit needs one deployment",
            fix="fit each deployment's runs separately",
        )
    return groups
