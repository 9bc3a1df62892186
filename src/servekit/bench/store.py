"""Run directories (shell): records appended and flushed per request, summaries written whole.

A run directory's results are never replaced without `force` (`--force`): a second run into
the same `--out` is refused before it starts, naming the file that is there. Everything read
back goes through `_files`: regular files only, bounded in size and line length, and every
failure is one ServekitError line.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from servekit import jsontext, mdtext
from servekit.analyze.point_columns import point_headers, point_rows
from servekit.bench.files import iter_lines, read_json_document
from servekit.errors import ServekitError, UsageError
from servekit.records import RecordFormatError, RequestRecord, record_from_json
from servekit.redaction import Redactor
from servekit.results.summary import Summary, SummaryPoint, load_summary
from servekit.results.tune import TuneDocument, load_tune
from servekit.results.validate import ValidateDocument, load_validate

RECORDS_FILE = "records.jsonl"
SUMMARY_FILE = "summary.json"
RUN_INFO_FILE = "run.json"
VALIDATE_FILE = "validate.json"
# What a bench or sim run writes; a second run into the directory must not replace them.
RUN_FILES = (RECORDS_FILE, SUMMARY_FILE, "summary.csv", "summary.md", RUN_INFO_FILE)
VALIDATE_FILES = (VALIDATE_FILE, "transcripts.jsonl")
_RUN_FIX = "pass a run directory written by servekit bench or servekit sim run"


def existing_results(run_dir: Path, names: Iterable[str]) -> list[str]:
    """The result files of `names` that `run_dir` already holds (an empty file is none)."""
    found = []
    for name in names:
        path = run_dir / name
        if path.is_symlink() or (path.exists() and (not path.is_file() or path.stat().st_size)):
            found.append(name)
    return found


def check_run_dir(run_dir: Path, names: Iterable[str], *, force: bool) -> None:
    """Refuse to write into a directory that holds results, unless `force`.

    Raises:
        ServekitError: `run_dir` is a file, or holds one of `names` and `force` is off.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise ServekitError(f"{run_dir} is not a directory", fix="choose a directory for --out")
    found = existing_results(run_dir, names)
    if found and not force:
        raise ServekitError(
            f"{run_dir} already holds a run ({found[0]} exists); it is not replaced",
            fix="pass --force to replace it, or choose another --out directory",
        )


def clear_results(run_dir: Path, names: Iterable[str]) -> None:
    """Remove the result files `names` from `run_dir` (`--force`): nothing else is touched.

    Raises:
        ServekitError: one of them is a directory or cannot be removed.
    """
    for name in names:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            raise ServekitError(f"{path} is a directory", fix="choose another --out directory")
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise ServekitError(
                f"cannot replace {path}: {exc.strerror}", fix="choose another --out directory"
            ) from None


def prepare_run_dir(run_dir: Path, names: Iterable[str], *, force: bool) -> None:
    """`check_run_dir`, then remove the results `names` a forced run replaces."""
    names = tuple(names)
    check_run_dir(run_dir, names, force=force)
    clear_results(run_dir, names)


class RecordWriter:
    """Append records to DIR/records.jsonl, one line each, flushed as each is written, with
    the run's secrets (`redactor`) removed from whatever text a record holds.

    With `force` the run's previous results (`RUN_FILES`) are removed first; without it a
    directory that holds any of them is refused.
    """

    def __init__(
        self, run_dir: Path, redactor: Redactor | None = None, *, force: bool = False
    ) -> None:
        check_run_dir(run_dir, RUN_FILES, force=force)
        self._redactor = redactor or Redactor()
        path = run_dir / RECORDS_FILE
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            clear_results(run_dir, RUN_FILES)
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise ServekitError(
                f"cannot write records in {run_dir}: {exc.strerror}",
                fix="choose a writable --out directory",
            ) from None

    def write(self, record: RequestRecord) -> None:
        """Append one record and flush it to the OS, so a killed run keeps it."""
        self._file.write(self._redactor.redact_json_line(record.to_json_line()) + "\n")
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


@dataclass(frozen=True, slots=True)
class RecordsRead:
    """The records of a run directory, and how many torn last lines were skipped."""

    records: list[RequestRecord]
    dropped: int = 0


def load_records(run_dir: Path, *, torn_tail: bool = True) -> RecordsRead:
    """Read every record of a run directory, validating each line.

    A run killed mid-write (kill -9, a full disk) can leave its last line cut short: with
    `torn_tail` an unparsable last line without its newline is skipped and counted in
    `dropped`. Any other bad line is an error.

    Raises:
        ServekitError: not a readable regular file, a line too long, or a line that is not
            a valid record (the message names the file and the line number).
    """
    path = run_dir / RECORDS_FILE
    records: list[RequestRecord] = []
    fix = "pass records.jsonl as servekit bench or sim run wrote it"
    for number, line, ended in iter_lines(path, fix=fix):
        if not line.strip():
            continue
        try:
            records.append(record_from_json(line, where=f"{path}:{number}"))
        except RecordFormatError:
            if torn_tail and not ended:  # the last line, cut short while it was written
                return RecordsRead(records, dropped=1)
            raise
    return RecordsRead(records)


def dropped_warning(path: Path, dropped: int) -> str:
    """The warning for torn last lines skipped while reading records."""
    lines = "line" if dropped == 1 else "lines"
    return f"{path}: dropped {dropped} torn last {lines} (the run was stopped while writing it)"


def read_records(run_dir: Path) -> list[RequestRecord]:
    """Read every record of a run directory; every line must be a valid record.

    Raises:
        ServekitError: a line is not a valid record (the message names the line).
    """
    return load_records(run_dir, torn_tail=False).records


def read_summary(run: Path) -> Summary:
    """Read and validate a run's summary.json (`run` is the run directory or the file itself).

    Raises:
        ServekitError: missing, not a regular file, too large, not JSON, of a schema_version
            this servekit does not read, or not a valid summary (the message names the file,
            what is wrong and the fix).
    """
    path = run / SUMMARY_FILE if run.is_dir() else run
    if run.is_dir() and not path.exists() and (run / RECORDS_FILE).is_file():
        raise ServekitError(
            f"{run} has records but no {SUMMARY_FILE} (the run was stopped before it ended)",
            fix=f"rebuild it with servekit bench --resummarize {run}",
        )
    doc = read_json_document(path, fix=_RUN_FIX)
    return load_summary(doc, where=str(path))


def read_validate(path: Path) -> ValidateDocument:
    """Read and validate a validate.json (bounded, regular files only).

    Raises:
        ServekitError: unreadable, not JSON, or not a valid validate.json.
    """
    doc = read_json_document(path, fix="pass the validate.json written by servekit validate --out")
    return load_validate(doc, where=str(path))


MAX_TUNE_BYTES = 256 * 2**20  # every candidate of a space of up to 200,000


def read_tune(path: Path) -> TuneDocument:
    """Read and validate a tune.json (`path` is the file or servekit tune's --out directory;
    bounded, regular files only).

    Raises:
        ServekitError: unreadable, too large, not JSON, or not a valid tune.json.
    """
    file = path / "tune.json" if path.is_dir() else path
    fix = "pass the --out directory of servekit tune"
    return load_tune(read_json_document(file, fix=fix, max_bytes=MAX_TUNE_BYTES), where=str(file))


def write_summary(run_dir: Path, summary: Summary) -> Path:
    """Write summary.json atomically (temp file, then rename)."""
    path = run_dir / SUMMARY_FILE
    text = jsontext.dumps(summary.as_json(), indent=2, what="summary.json")
    write_atomically(path, text + "\n")
    return path


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory and a rename,
    so a reader never sees half a file.

    Raises:
        UsageError: the file cannot be written.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise UsageError(
            f"cannot write {path.name}: {exc.strerror or exc}", fix="choose a writable path"
        ) from None


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
    # the server's name for it: untrusted; not known in a summary rebuilt from records alone
    title = mdtext.cell(summary.target.model or "model not known")
    text = f"# servekit bench: {title}\n\n" + "\n".join(lines) + "\n"
    (run_dir / "summary.md").write_text(text, encoding="utf-8")
