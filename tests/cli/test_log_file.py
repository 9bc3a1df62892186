"""cli/_log_file: a log read in blocks of whole lines, long lines cut, the rest skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.cli import _log_file
from servekit.cli._log_file import log_line_batches


def _read(path: Path) -> list[str]:
    return [line for batch in log_line_batches(path) for line in batch]


def test_lines_come_back_whole_across_block_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 7-byte blocks every line still arrives once, whole, in order (UTF-8 split
    across blocks included)."""
    monkeypatch.setattr(_log_file, "BLOCK_BYTES", 7)
    lines = ["first line", "", "zweite Zeile: größer", "x" * 30, "last"]
    log = tmp_path / "a.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _read(log) == lines


def test_a_line_longer_than_the_limit_is_cut_and_numbering_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line past MAX_LINE_BYTES keeps its first MAX_LINE_BYTES; the next line is next."""
    monkeypatch.setattr(_log_file, "BLOCK_BYTES", 8)
    monkeypatch.setattr(_log_file, "MAX_LINE_BYTES", 10)
    log = tmp_path / "a.log"
    log.write_bytes(b"short\n" + b"L" * 100 + b"\nafter\nend")
    assert _read(log) == ["short", "L" * 10, "after", "end"]


def test_bad_bytes_are_replaced_not_fatal(tmp_path: Path) -> None:
    """Invalid UTF-8 becomes U+FFFD; the line is still read."""
    log = tmp_path / "a.log"
    log.write_bytes(b"ok \xff\xfe here\n")
    assert _read(log) == ["ok \ufffd\ufffd here"]
