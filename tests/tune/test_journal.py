"""tune's journal: appended events read back, a torn last line ignored, a broken middle one
named."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.errors import ServekitError, UsageError
from servekit.tune.journal import JOURNAL_FILE, Journal, read_journal


def test_events_read_back_and_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    """Inputs, engines still running and measured points come back; the half-written last
    line of a killed run is ignored."""
    journal = Journal(tmp_path)
    journal.write("inputs", inputs={"slo": "tpot_p50<=5ms"})
    journal.write("engine_start", profile="a", candidate="c1")
    journal.write("measured", candidate="c1", load=4.0, point={"load": 4.0, "met": True})
    journal.write("engine_stop", profile="a", candidate="c1", startup_s=12.5)
    journal.write("engine_start", profile="b", candidate="c2")
    journal.close()
    with (tmp_path / JOURNAL_FILE).open("a") as f:
        f.write('{"event": "measured", "candidate": "c2", "lo')
    state = read_journal(tmp_path)
    assert state.inputs == {"slo": "tpot_p50<=5ms"}
    assert state.engines == ["b"]
    assert state.measured == {("c1", 4.0): {"load": 4.0, "met": True}}
    assert state.startup_s == {"c1": 12.5}


def test_a_broken_line_before_the_end_is_an_error(tmp_path: Path) -> None:
    """Only the last line may be torn: a broken one before it names its line."""
    (tmp_path / JOURNAL_FILE).write_text('{"event": "inputs", "inputs": {}}\nnot json\n{}\n')
    with pytest.raises(ServekitError, match=r"tune-journal.jsonl:2 is not a JSON object"):
        read_journal(tmp_path)


def test_missing_journal_is_empty(tmp_path: Path) -> None:
    """No journal: nothing was done."""
    assert read_journal(tmp_path).inputs is None


def test_engine_cpus_parse_like_taskset() -> None:
    """1, 0,1 and 0-1 are CPU lists; text or a CPU the machine lacks is one usage line."""
    from servekit.cli._tune_spec import parse_cpus

    assert parse_cpus("0") == frozenset({0})
    assert parse_cpus("0-1") == parse_cpus("0,1") == frozenset({0, 1})
    with pytest.raises(UsageError, match="is not a CPU list"):
        parse_cpus("one")
    with pytest.raises(UsageError, match="this machine does not have"):
        parse_cpus("4096")
