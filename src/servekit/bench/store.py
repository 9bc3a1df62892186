"""Run directories (shell): records appended and flushed per request, summaries written whole."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType

from servekit.errors import ServekitError
from servekit.records import RequestRecord, record_from_json

RECORDS_FILE = "records.jsonl"
SUMMARY_FILE = "summary.json"


class RecordWriter:
    """Append records to DIR/records.jsonl, one line each, flushed as each is written."""

    def __init__(self, run_dir: Path) -> None:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self._file = (run_dir / RECORDS_FILE).open("a", encoding="utf-8")
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
        raise ServekitError(f"cannot read {path}: {exc.strerror}") from None
    return [
        record_from_json(line, where=f"{path}:{number}")
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]


def write_summary(run_dir: Path, summary: dict[str, object]) -> Path:
    """Write summary.json atomically (temp file, then rename)."""
    path = run_dir / SUMMARY_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
