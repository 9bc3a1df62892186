"""Run directories (shell): records appended and flushed per request, summaries written whole."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from servekit import jsontext
from servekit.analyze.point_columns import point_headers, point_rows
from servekit.errors import ServekitError
from servekit.records import RequestRecord, record_from_json
from servekit.results.summary import Summary, SummaryPoint, load_summary

RECORDS_FILE = "records.jsonl"
SUMMARY_FILE = "summary.json"


class RecordWriter:
    """Append records to DIR/records.jsonl, one line each, flushed as each is written."""

    def __init__(self, run_dir: Path) -> None:
        path = run_dir / RECORDS_FILE
        if path.is_file() and path.stat().st_size > 0:
            raise ServekitError(
                f"{run_dir} already holds a run ({RECORDS_FILE} is not empty)",
                fix="choose a new --out directory or remove the old run",
            )
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise ServekitError(
                f"cannot write records in {run_dir}: {exc.strerror}",
                fix="choose a writable --out directory",
            ) from None

    def write(self, record: RequestRecord) -> None:
        """Append one record and flush it to the OS, so a killed run keeps it."""
        self._file.write(record.to_json_line() + "\n")
        self._file.flush()

    def close(self) -> None:
        """Flush to disk and close."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_records(run_dir: Path) -> list[RequestRecord]:
    """Read every record of a run directory, validating each line.

    Raises:
        ServekitError: a line is not a valid record (the message names the line).
    """
    path = run_dir / RECORDS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ServekitError(
            f"cannot read {path}: {exc.strerror}", fix="pass a readable records.jsonl"
        ) from None
    return [
        record_from_json(line, where=f"{path}:{number}")
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]


def read_summary(run: Path) -> Summary:
    """Read and validate a run's summary.json (`run` is the run directory or the file itself).

    Raises:
        ServekitError: missing, not JSON, of a schema_version this servekit does not read, or
            not a valid summary (the message names the file, the version and the fix).
    """
    path = run / SUMMARY_FILE if run.is_dir() else run
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ServekitError(
            f"cannot read {path}: {exc.strerror}",
            fix="pass a run directory written by servekit bench or servekit sim run",
        ) from None
    except json.JSONDecodeError as exc:
        raise ServekitError(
            f"{path} is not JSON ({exc.msg} at line {exc.lineno})",
            fix="re-run the bench or sim run that wrote it; it was cut or edited",
        ) from None
    return load_summary(doc, where=str(path))


def write_summary(run_dir: Path, summary: Summary) -> Path:
    """Write summary.json atomically (temp file, then rename)."""
    path = run_dir / SUMMARY_FILE
    tmp = path.with_suffix(".json.tmp")
    text = jsontext.dumps(summary.as_json(), indent=2, what="summary.json")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


Cell = int | float | bool | None
CSV_COLUMNS: tuple[tuple[str, Callable[[SummaryPoint], Cell]], ...] = (
    ("concurrency", lambda p: p.concurrency),
    ("rate_rps", lambda p: p.rate_rps),
    ("completed", lambda p: p.completed),
    ("failed", lambda p: p.failed),
    ("output_tok_s", lambda p: p.output_throughput_tok_s),
    ("latency_mean_s", lambda p: p.latency_s.mean),
    ("latency_p99_s", lambda p: p.latency_s.p99),
    ("ttft_mean_ms", lambda p: p.ttft_ms.mean),
    ("ttft_p99_ms", lambda p: p.ttft_ms.p99),
    ("ttfo_mean_ms", lambda p: p.ttfo_ms.mean),
    ("tpot_mean_ms", lambda p: p.tpot_ms.mean),
    ("itl_mean_ms", lambda p: p.itl_ms.mean),
    ("per_stream_tok_s", lambda p: p.per_stream_tok_s.mean),
    ("goodput_rps", lambda p: p.goodput_rps),
    ("valid", lambda p: p.client.valid),
)


def write_summary_tables(run_dir: Path, summary: Summary) -> None:
    """Write summary.csv (one row per point) and summary.md (the deployment's table and
    timing columns) next to summary.json."""
    points = summary.points
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([name for name, _ in CSV_COLUMNS])
    for point in points:
        writer.writerow(["" if (v := pick(point)) is None else v for _, pick in CSV_COLUMNS])
    (run_dir / "summary.csv").write_text(buffer.getvalue(), encoding="utf-8")

    lines = [
        "| " + " | ".join(point_headers("markdown")) + " |",
        "|" + "---|" * len(point_headers("markdown")),
        *("| " + " | ".join(row) + " |" for row in point_rows(points, "markdown")),
    ]
    title = summary.target.model
    text = f"# servekit bench: {title}\n\n" + "\n".join(lines) + "\n"
    (run_dir / "summary.md").write_text(text, encoding="utf-8")
