"""run.json of a bench run as one typed model (core): what a summary is rebuilt from.

`servekit bench` writes run.json when the sweep starts and again as each point begins and
when it ends: the summary's header (target, workload, command), every planned point, and
for each finished point the server and client blocks that records.jsonl does not hold.
A run stopped by SIGTERM or kill -9 before it wrote summary.json can then be summarized
again from records.jsonl (`servekit bench --resummarize DIR`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationError

from servekit.results._base import Document, DocumentError, RateOrInf, first_error, refuse_newer
from servekit.results.summary import ClientBlock, ServerBlock, Summary, load_summary

RUN_INFO_VERSION: Literal[1] = 1


class PlannedPoint(Document):
    """One point of the sweep; `finished` ones keep what only the live run measured."""

    label: str
    concurrency: int | None
    rate_rps: RateOrInf | None
    finished: bool = False
    server: ServerBlock | None = None
    client: ClientBlock | None = None
    # a point sent at explicit offsets (a trace replay): the sends planned, the p99 lag bound
    schedule_planned: int | None = None
    max_schedule_lag_ms: float | None = None


class RunInfo(Document):
    """run.json: the summary's header (its `points` empty) and the planned points."""

    schema_version: Literal[1]
    summary: Summary
    points: list[PlannedPoint]


def load_run_info(doc: object, *, where: str = "run.json") -> RunInfo:
    """Validate a parsed run.json.

    Raises:
        DocumentError: a newer or unknown schema_version, or an invalid document.
    """
    refuse_newer(doc, kind="run", current=RUN_INFO_VERSION, where=where)
    if isinstance(doc, dict) and isinstance(doc.get("summary"), dict):
        load_summary(doc["summary"], where=f"{where} (its summary)")  # the summary's own errors
    try:
        return RunInfo.model_validate(doc)
    except ValidationError as exc:
        raise DocumentError(
            f"{where} is not a servekit run.json: {first_error(exc)}",
            fix="pass a run directory written by servekit bench",
        ) from None
