"""Run directories (shell): records appended and flushed per request, summaries written whole."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from servekit.errors import ServekitError
from servekit.records import RequestRecord, record_from_json

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


def read_summary(run: Path) -> dict[str, Any]:
    """Read a run's summary.json (`run` is the run directory or the file itself).

    Raises:
        ServekitError: missing, not JSON, or without a `points` list.
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
    if not isinstance(doc, dict) or not isinstance(doc.get("points"), list):
        raise ServekitError(
            f"{path} has no points list: not a servekit summary.json",
            fix="pass a run directory written by servekit bench or servekit sim run",
        )
    return doc


def write_summary(run_dir: Path, summary: dict[str, object]) -> Path:
    """Write summary.json atomically (temp file, then rename)."""
    path = run_dir / SUMMARY_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


CSV_COLUMNS = (
    ("concurrency", ("concurrency",)),
    ("rate_rps", ("rate_rps",)),
    ("completed", ("completed",)),
    ("failed", ("failed",)),
    ("output_tok_s", ("output_throughput_tok_s",)),
    ("latency_mean_s", ("latency_s", "mean")),
    ("latency_p99_s", ("latency_s", "p99")),
    ("ttft_mean_ms", ("ttft_ms", "mean")),
    ("ttft_p99_ms", ("ttft_ms", "p99")),
    ("ttfo_mean_ms", ("ttfo_ms", "mean")),
    ("tpot_mean_ms", ("tpot_ms", "mean")),
    ("itl_mean_ms", ("itl_ms", "mean")),
    ("per_stream_tok_s", ("per_stream_tok_s", "mean")),
    ("goodput_rps", ("goodput_rps",)),
    ("valid", ("client", "valid")),
)


def _pick(point: dict[str, object], path: tuple[str, ...]) -> object:
    value: object = point
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def write_summary_tables(run_dir: Path, summary: dict[str, object]) -> None:
    """Write summary.csv (one row per point) and summary.md (the deployment's table and
    timing columns) next to summary.json."""
    raw = summary.get("points")
    points = [p for p in raw if isinstance(p, dict)] if isinstance(raw, list) else []
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([name for name, _ in CSV_COLUMNS])
    for point in points:
        writer.writerow(["" if (v := _pick(point, path)) is None else v for _, path in CSV_COLUMNS])
    (run_dir / "summary.csv").write_text(buffer.getvalue(), encoding="utf-8")

    def fmt(value: object, spec: str) -> str:
        return "-" if not isinstance(value, int | float) else format(value, spec)

    lines = [
        "| load | output tok/s | mean latency s | TTFT ms | TPOT ms | per-stream tok/s | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in points:
        load = f"c={p['concurrency']}" if p.get("concurrency") else f"{p.get('rate_rps')} req/s"
        lines.append(
            f"| {load} | {fmt(p.get('output_throughput_tok_s'), '.1f')} "
            f"| {fmt(_pick(p, ('latency_s', 'mean')), '.2f')} "
            f"| {fmt(_pick(p, ('ttft_ms', 'mean')), '.0f')} "
            f"| {fmt(_pick(p, ('tpot_ms', 'mean')), '.1f')} "
            f"| {fmt(_pick(p, ('per_stream_tok_s', 'mean')), '.1f')} | {p.get('failed')} |"
        )
    target = summary.get("target")
    title = target.get("model") if isinstance(target, dict) else None
    text = f"# servekit bench: {title}\n\n" + "\n".join(lines) + "\n"
    (run_dir / "summary.md").write_text(text, encoding="utf-8")
