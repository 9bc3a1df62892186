"""Hostile input to the results loaders: summary.json, validate.json and records.jsonl.

Whatever the bytes (another tool's JSON, binary data, a mutated servekit document, a FIFO,
/dev/zero, a directory, a file too large), reading gives a result or one ServekitError line
naming the file - never another exception, never a pydantic dump, never an unbounded read.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servekit.analyze.summarize import point_metrics, point_to_json, summary_document
from servekit.bench.store import RecordsRead, load_records, read_summary, read_validate
from servekit.cli.main import cli
from servekit.errors import ServekitError
from servekit.records import RequestRecord
from servekit.results.summary import Target, Workload

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BOUND_S = 5.0  # one read of a small hostile file; far above the milliseconds it takes

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=4),
    max_leaves=30,
)  # fmt: skip


def _record(i: int) -> RequestRecord:
    base = 1_000_000_000 * i
    return RequestRecord(
        f"c=2-{i}", "c=2", base, base, base + 5_000_000, base + 6_000_000, base + 40_000_000,
        (base + 5_000_000, base + 20_000_000, base + 40_000_000), (1, 2, 2), 16, 5, 0, "length",
    )  # fmt: skip


def _summary_doc() -> dict[str, Any]:
    records = [_record(i) for i in range(4)]
    point = point_to_json(point_metrics(records), concurrency=2, rate_rps=None)
    summary = summary_document(
        servekit_version="0.0.0",
        started_at="2026-01-01T00:00:00+00:00",
        target=Target(url="http://127.0.0.1:8000", model="m", server_version=None, profile=None),
        workload=Workload(input_len=16, output_len=5, temperature=0.0, requests_per_point=4,
                          seed=0),
        points=[point],
    )  # fmt: skip
    return summary.as_json()


VALID_SUMMARY = _summary_doc()
VALID_VALIDATE = {
    "schema_version": 1,
    "passed": True,
    "target": {"url": "http://127.0.0.1:8000", "model": "m"},
    "checks": [{"name": "health", "status": "pass", "detail": "200", "duration_s": 0.01}],
}
VALID_RECORD = json.loads(_record(0).to_json_line())


def _outcome(read: Callable[[], object], path: Path) -> object:
    """Call a loader; it returns or raises one ServekitError line naming `path`, quickly."""
    start = time.monotonic()
    try:
        result = read()
    except ServekitError as exc:
        result = exc
    assert time.monotonic() - start < BOUND_S
    if isinstance(result, ServekitError):
        text = str(result)
        assert "\n" not in text, text
        assert str(path) in text, text
        assert "pydantic" not in text, text
        assert result.fix, text
    return result


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """A JSON document with one value replaced, one key removed or one key added."""
    if isinstance(doc, dict) and doc:
        key = draw(st.sampled_from(sorted(doc)))
        action = draw(st.sampled_from(["replace", "drop", "add", "recurse"]))
        out = dict(doc)
        if action == "replace":
            out[key] = draw(JSON)
        elif action == "drop":
            del out[key]
        elif action == "add":
            out[draw(st.text(max_size=12))] = draw(JSON)
        else:
            out[key] = draw(mutated(doc[key]))
        return out
    if isinstance(doc, list) and doc:
        index = draw(st.integers(0, len(doc) - 1))
        out_list = list(doc)
        out_list[index] = draw(mutated(doc[index]))
        return out_list
    return draw(JSON)


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@FUZZ
@given(data=st.binary(max_size=2000))
def test_summary_from_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    """Arbitrary bytes as summary.json: a Summary or one ServekitError."""
    path = _write(tmp_path, "summary.json", data)
    _outcome(lambda: read_summary(path), path)


@FUZZ
@given(doc=JSON)
def test_summary_from_arbitrary_json(tmp_path: Path, doc: Any) -> None:
    """Arbitrary JSON (another tool's document) as summary.json: one ServekitError at most."""
    path = _write(tmp_path, "summary.json", json.dumps(doc).encode())
    _outcome(lambda: read_summary(path), path)


@FUZZ
@given(doc=mutated(VALID_SUMMARY))
def test_summary_from_a_mutated_summary(tmp_path: Path, doc: Any) -> None:
    """A servekit summary with one value changed: a Summary or one ServekitError."""
    path = _write(tmp_path, "summary.json", json.dumps(doc).encode())
    _outcome(lambda: read_summary(path), path)


@FUZZ
@given(doc=mutated(VALID_VALIDATE) | JSON, raw=st.binary(max_size=300))
def test_validate_from_hostile_documents(tmp_path: Path, doc: Any, raw: bytes) -> None:
    """validate.json mutated, foreign or binary: a document or one ServekitError."""
    path = _write(tmp_path, "validate.json", json.dumps(doc).encode())
    _outcome(lambda: read_validate(path), path)
    path = _write(tmp_path, "validate.json", raw)
    _outcome(lambda: read_validate(path), path)


@FUZZ
@given(lines=st.lists(mutated(VALID_RECORD) | JSON, max_size=4), tail=st.binary(max_size=200))
def test_records_from_hostile_lines(tmp_path: Path, lines: list[Any], tail: bytes) -> None:
    """records.jsonl of mutated, foreign and binary lines: records or one ServekitError."""
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines) + tail
    path = _write(tmp_path, "records.jsonl", body)
    read = _outcome(lambda: load_records(tmp_path), path)
    if isinstance(read, RecordsRead):  # what report does next
        point_metrics(read.records, ci=False)


@FUZZ
@given(chunks=st.lists(st.integers(), max_size=3),
       tokens=st.lists(st.integers(-4, 64) | st.integers(2**27, 2**70), max_size=3),
       end=st.integers())  # fmt: skip
def test_loaded_records_can_be_summarized(
    tmp_path: Path, chunks: list[int], tokens: list[int], end: int
) -> None:
    """Records that load can be summarized: unpaired chunk lists and integers past 64 bits
    are refused when read, not met later as a numpy error."""
    doc = dict(VALID_RECORD, chunk_ns=chunks, chunk_tokens=tokens, end_ns=end)
    path = _write(tmp_path, "records.jsonl", (json.dumps(doc) + "\n").encode())
    read = _outcome(lambda: load_records(tmp_path), path)
    if isinstance(read, RecordsRead):
        point_metrics(read.records, ci=False)


@pytest.mark.parametrize(
    "change",
    [{"chunk_tokens": [1, 10**15, 2]}, {"output_tokens": 10**15}, {"chunk_tokens": [1, -3, 2]}],
    ids=["huge-chunk", "huge-usage", "negative"],
)
def test_impossible_token_counts_are_refused_when_read(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """A record claiming 10^15 tokens (or a negative count) is one error naming its line,
    not a MemoryError when the analysis makes one ITL sample per token."""
    doc = dict(VALID_RECORD, **change)
    _write(tmp_path, "records.jsonl", (json.dumps(VALID_RECORD) + "\n" + json.dumps(doc) + "\n"
                                       + json.dumps(VALID_RECORD) + "\n").encode())  # fmt: skip
    with pytest.raises(ServekitError, match=r"records\.jsonl:2: not a valid request record"):
        load_records(tmp_path)


def test_a_servekit_summary_still_reads(tmp_path: Path) -> None:
    """The unmutated documents the fuzz tests start from are valid (the tests bite)."""
    _write(tmp_path, "summary.json", json.dumps(VALID_SUMMARY).encode())
    assert read_summary(tmp_path).points[0].completed == 4
    path = _write(tmp_path, "validate.json", json.dumps(VALID_VALIDATE).encode())
    assert read_validate(path).passed
    _write(tmp_path, "records.jsonl", (json.dumps(VALID_RECORD) + "\n").encode())
    assert load_records(tmp_path).records == [_record(0)]


@pytest.mark.parametrize(
    "text",
    [
        '{"points": [], "schema_version": 1, "x": NaN}',
        "[" * 100_000 + "]" * 100_000,
        '{"points": [], "n": ' + "9" * 5000 + "}",
        "\ufeff{}",
    ],
    ids=["nan", "deep", "huge-int", "bom"],
)
def test_summary_edge_json_is_one_error(tmp_path: Path, text: str) -> None:
    """NaN, 100,000 nested lists, a 5000-digit integer, a BOM: one ServekitError each."""
    path = _write(tmp_path, "summary.json", text.encode())
    assert isinstance(_outcome(lambda: read_summary(path), path), ServekitError)


def test_a_bad_record_is_one_line_without_a_pydantic_dump(tmp_path: Path) -> None:
    """A record with several wrong fields names the line and the first problem only."""
    bad = dict(VALID_RECORD, end_ns="soon", sent_ns=[1], bogus=1)
    _write(tmp_path, "records.jsonl", (json.dumps(VALID_RECORD) + "\n" + json.dumps(bad) + "\n"
                                       + json.dumps(VALID_RECORD) + "\n").encode())  # fmt: skip
    with pytest.raises(ServekitError) as caught:
        load_records(tmp_path)
    text = str(caught.value)
    assert "records.jsonl:2: not a valid request record" in text
    assert "\n" not in text
    assert "more)" in text
    assert "errors.pydantic.dev" not in text


def test_control_characters_in_keys_are_escaped(tmp_path: Path) -> None:
    """A key with a terminal escape sequence is shown escaped, not sent to the terminal."""
    doc = dict(VALID_SUMMARY, **{"\x1b[2Jboom": 1})
    path = _write(tmp_path, "summary.json", json.dumps(doc).encode())
    with pytest.raises(ServekitError) as caught:
        read_summary(path)
    assert "\x1b" not in str(caught.value)
    assert "\\x1b[2Jboom" in str(caught.value)


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


NON_REGULAR: dict[str, Callable[[Path], Path]] = {
    "fifo": _fifo,
    "dev-zero": lambda _: Path("/dev/zero"),
    "directory": lambda tmp: tmp,
}


@pytest.mark.parametrize("kind", sorted(NON_REGULAR))
def test_non_regular_files_are_refused(tmp_path: Path, kind: str) -> None:
    """A FIFO, /dev/zero or a directory is refused at once by every loader (no blocking,
    no unbounded read)."""
    target = NON_REGULAR[kind](tmp_path)
    expect = {"fifo": "is a FIFO", "dev-zero": "is a device", "directory": "is a directory"}[kind]
    path = target / "summary.json" if kind == "directory" else target
    if kind == "directory":
        path.mkdir()
    error = _outcome(lambda: read_summary(target), path)  # a run dir, or the file itself
    assert isinstance(error, ServekitError)
    assert expect in str(error)
    error = _outcome(lambda: read_validate(target), target)
    assert isinstance(error, ServekitError)
    assert expect in str(error)
    run = tmp_path / "run"
    run.mkdir()
    records = run / "records.jsonl"
    if kind == "directory":
        records.mkdir()
    else:
        records.symlink_to(target)
    error = _outcome(lambda: load_records(run), records)
    assert isinstance(error, ServekitError)
    assert expect in str(error)


def test_compare_dev_zero_fails_at_once() -> None:
    """`servekit compare /dev/zero /dev/zero` is one error line and exit 1, not a memory
    blow-up."""
    start = time.monotonic()
    result = CliRunner().invoke(cli, ["compare", "/dev/zero", "/dev/zero"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "servekit: error: /dev/zero is a device, not a regular file; pass a run directory "
        "written by servekit bench or servekit sim run"
    ]
    assert time.monotonic() - start < BOUND_S


def test_oversized_files_and_lines_are_refused(tmp_path: Path) -> None:
    """A summary.json past the size bound is refused unread (a sparse 65 MiB file), and a
    records line past the line bound is an error naming the line."""
    big = tmp_path / "summary.json"
    with big.open("wb") as f:
        f.truncate(65 * 2**20)
    error = _outcome(lambda: read_summary(big), big)
    assert isinstance(error, ServekitError)
    assert "over the" in str(error)
    records = tmp_path / "records.jsonl"
    records.write_bytes(json.dumps(VALID_RECORD).encode() + b"\n" + b"x" * (16 * 2**20 + 10))
    error = _outcome(lambda: load_records(tmp_path), records)
    assert isinstance(error, ServekitError)
    assert "records.jsonl:2: line is longer than" in str(error)


def test_report_on_a_binary_summary_is_one_error(tmp_path: Path) -> None:
    """`servekit report` on a binary summary.json exits 1 with one error line."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    result = CliRunner().invoke(cli, ["report", str(run), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "is not UTF-8 text" in lines[0]
