"""records.jsonl and summary.json never hold the run's secrets (bench/store, bench/summary)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from servekit.bench.spec import BenchSpec, PointOutcome, PointSpec
from servekit.bench.store import RecordWriter, read_records
from servekit.bench.summary import ServerInfo, bench_summary
from servekit.records import RequestRecord
from servekit.redaction import redactor_of
from servekit.results.summary import ServerBlock

KEY = "sk-echoed-0123456789"


def test_an_echoed_key_is_redacted_in_the_record_line(tmp_path: Path) -> None:
    """A failure message quoting the key is written redacted; the line still reads back,
    and records without the key are written exactly as before."""
    clean = RequestRecord("a", "c=1", 1, 2, 3, 4, 5, (3, 5), (1, 2), 10, 3, 0, "length")
    echoed = dataclasses.replace(clean, id="b", error_kind="http_401", error=f"bad key {KEY}")
    with RecordWriter(tmp_path, redactor_of([KEY])) as writer:
        writer.write(clean)
        writer.write(echoed)
    text = (tmp_path / "records.jsonl").read_text(encoding="utf-8")
    assert KEY not in text
    assert text.splitlines()[0] == clean.to_json_line()
    assert read_records(tmp_path)[1].error == "bad key [REDACTED]"


def test_the_summary_of_a_server_that_echoes_the_key_is_redacted() -> None:
    """Model id, /version and model entry from the server lose the key in the document."""
    spec = BenchSpec("http://h:1", model=f"m {KEY}", redactor=redactor_of([KEY]))
    info = ServerInfo(f"m {KEY}", 9, f"v {KEY}", {"id": f"m {KEY}", "root": KEY})
    record = RequestRecord("a", "c=1", 0, 0, None, None, 1, error_kind="x", error=KEY)
    outcome = PointOutcome(PointSpec("c=1", concurrency=1), [record], ServerBlock(), [KEY])
    summary = bench_summary(spec, [outcome], version="0", started_at="t",
                            server_version=info.version, profile=None, server=info)  # fmt: skip
    redacted = spec.redactor.redact_document(summary)
    assert KEY in str(summary.as_json())
    assert KEY not in str(redacted.as_json())
    assert redacted.target.model == "m [REDACTED]"
