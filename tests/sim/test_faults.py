"""Tests of `--fault` parsing."""

from __future__ import annotations

import pytest

from servekit.errors import UsageError
from servekit.sim.faults import Faults, parse_fault, parse_faults


def test_every_accepted_form_parses() -> None:
    """Each documented fault form sets its field; together they combine."""
    faults = parse_faults(
        [
            "crash-at-concurrency=2",
            "corrupt-at-concurrency=4",
            "slow-start=10",
            "oom-at-startup",
            "drop-stream=0.25",
        ]
    )
    assert faults == Faults(
        crash_at_concurrency=2,
        corrupt_at_concurrency=4,
        slow_start_s=10.0,
        oom_at_startup=True,
        drop_stream_p=0.25,
    )
    assert faults.warmup_s == 2.0


def test_no_faults_is_the_default() -> None:
    """No --fault values inject nothing."""
    assert parse_faults([]) == Faults()
    assert parse_fault(" Drop-Stream = 1 ").drop_stream_p == 1.0


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("explode", "unknown fault 'explode'"),
        ("crash-at-concurrency", "needs a value"),
        ("crash-at-concurrency=two", "'two' is not a whole number"),
        ("corrupt-at-concurrency=0", "at least 1"),
        ("slow-start=-3", "positive number of seconds"),
        ("slow-start=nan", "not a finite number"),
        ("drop-stream=0", "0 < P <= 1"),
        ("drop-stream=1.5", "0 < P <= 1"),
        ("oom-at-startup=yes", "takes no value"),
    ],
)
def test_bad_values_name_the_value_and_the_accepted_forms(value: str, why: str) -> None:
    """A malformed --fault is a UsageError quoting the value, the reason and every form."""
    with pytest.raises(UsageError) as info:
        parse_faults([value])
    message = str(info.value)
    assert repr(value) in message
    assert why in message
    assert "crash-at-concurrency=N" in message
    assert "drop-stream=P" in message
    assert info.value.exit_code == 2


def test_a_fault_given_twice_is_rejected() -> None:
    """Repeating a fault kind is ambiguous and rejected."""
    with pytest.raises(UsageError, match="given twice"):
        parse_faults(["slow-start=1", "slow-start=2"])
    with pytest.raises(UsageError, match="given twice"):
        parse_faults(["oom-at-startup", "oom-at-startup"])
