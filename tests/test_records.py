"""Tests of the RequestRecord JSONL contract and the run-directory store."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.bench.store import RecordWriter, read_records
from servekit.errors import ServekitError
from servekit.records import RequestRecord, record_from_json


def test_roundtrip(tmp_path: Path) -> None:
    """A record written as a JSON line reads back equal."""
    rec = RequestRecord("a", "c=1", 1, 2, 3, 4, 5, (3, 5), (1, 2), 10, 3, 0, "length")
    with RecordWriter(tmp_path) as writer:
        writer.write(rec)
    assert read_records(tmp_path) == [rec]


def test_each_record_is_flushed_when_written(tmp_path: Path) -> None:
    """A record is on disk as soon as write() returns, before close."""
    writer = RecordWriter(tmp_path)
    writer.write(RequestRecord("a", "p", 0, 0, None, None, 1))
    assert (tmp_path / "records.jsonl").read_text(encoding="utf-8").count("\n") == 1
    writer.close()


def test_bad_line_names_file_and_line(tmp_path: Path) -> None:
    """A corrupt line is reported with its file and line number."""
    (tmp_path / "records.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    with pytest.raises(ServekitError, match=r"records.jsonl:1: not a valid request record"):
        read_records(tmp_path)
    with pytest.raises(ServekitError):
        record_from_json("not json")


def test_unknown_keys_and_bad_types_are_rejected() -> None:
    """Records read back are validated: unknown keys and wrong types are errors."""
    good = RequestRecord("a", "p", 0, 0, None, None, 1).to_json_line()
    assert record_from_json(good) == RequestRecord("a", "p", 0, 0, None, None, 1)
    with pytest.raises(ServekitError):
        record_from_json(good[:-1] + ',"bogus":1}')
    with pytest.raises(ServekitError):
        record_from_json(good.replace('"end_ns":1', '"end_ns":"soon"'))


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"session": "a", "turn": 1, "tool_calls": 1, "tool_args_invalid": 2},
            "tool_args_invalid 2 is more than tool_calls 1",
        ),
        ({"session": "a", "turn": 0}, "turn 0: turns count from 1"),
        ({"turn": 2}, "turn or session_end without a session"),
        ({"session_end": "completed"}, "turn or session_end without a session"),
    ],
)
def test_session_fields_no_run_writes_are_refused(fields: dict[str, object], problem: str) -> None:
    """More invalid tool calls than calls, a turn below 1, and a turn or session end without
    a session are records no run writes: one error naming the problem."""
    line = RequestRecord("a", "p", 0, 0, None, None, 1, **fields).to_json_line()  # type: ignore[arg-type]
    with pytest.raises(ServekitError) as caught:
        record_from_json(line, where="r")
    assert caught.value.message == f"r: not a valid request record ({problem})"
    ok = RequestRecord("a", "p", 0, 0, None, None, 1, session="a", turn=1, session_end="stopped")
    assert record_from_json(ok.to_json_line()) == ok
