"""tune's SLO string: parsing, canonical text, judging a point and a request."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servekit.errors import UsageError
from servekit.tune.slo import Bound, parse_slo


@dataclass(frozen=True)
class _Stats:
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True)
class _Point:
    ttft_ms: _Stats
    ttfo_ms: _Stats
    tpot_ms: _Stats
    itl_ms: _Stats
    latency_s: _Stats
    per_stream_tok_s: _Stats


def _point(ttft: float = 100, tpot: float = 20, e2e_s: float = 3, per_stream: float = 50) -> _Point:
    def same(v: float) -> _Stats:
        return _Stats(v, v, v, v)

    return _Point(same(ttft), same(ttft), same(tpot), same(tpot), same(e2e_s), same(per_stream))


def test_issue_example_parses_to_two_bounds_in_ms() -> None:
    """'ttft_p99<=2s,tpot_p50<=25ms' is TTFT p99 <= 2000 ms and TPOT p50 <= 25 ms."""
    slo = parse_slo("ttft_p99<=2s,tpot_p50<=25ms")
    assert slo.bounds == (Bound("ttft", "p99", 2000.0), Bound("tpot", "p50", 25.0))
    assert slo.text() == "ttft_p99<=2s,tpot_p50<=25ms"


def test_per_stream_is_a_lower_bound_in_tok_s_and_defaults_to_p50() -> None:
    """per_stream>=60 means the median stream's speed is at least 60 tok/s."""
    slo = parse_slo("per_stream>=60")
    assert slo.bounds == (Bound("per_stream", "p50", 60.0),)
    assert slo.text() == "per_stream_p50>=60tok/s"
    assert parse_slo("per_stream_p90>=60tok/s").bounds[0].statistic == "p90"


def test_latency_is_an_alias_of_e2e() -> None:
    """latency_p90<=30s and e2e_p90<=30s are the same bound."""
    assert parse_slo("latency_p90<=30s").bounds == parse_slo("e2e_p90<=30s").bounds


def test_judge_names_each_violated_bound_with_its_value() -> None:
    """A point over a bound is not met; the violation names the statistic and the value."""
    slo = parse_slo("ttft_p99<=2s,per_stream_p50>=60tok/s")
    judged = slo.judge(_point(ttft=2500, per_stream=70))
    assert not judged.met
    assert judged.violated == ("ttft_p99 2500 ms > 2000",)
    assert judged.observed == (2500, 70)
    assert slo.judge(_point(ttft=1999, per_stream=60)).met


def test_missing_statistic_is_not_met() -> None:
    """A point with no TPOT samples cannot meet a TPOT bound."""
    slo = parse_slo("tpot_p50<=25ms")
    point = _point()
    empty = _Point(
        point.ttft_ms,
        point.ttfo_ms,
        _Stats(None, None, None, None),
        point.itl_ms,
        point.latency_s,
        point.per_stream_tok_s,
    )
    assert not slo.judge(empty).met


def test_request_within_checks_each_bound_on_one_request() -> None:
    """A request is within the SLO when its own TTFT, TPOT and speed are; ITL is skipped."""
    slo = parse_slo("ttft_p99<=2s,per_stream_p50>=60tok/s,itl_p50<=1ms")
    assert slo.request_within(ttft_ms=1000, ttfo_ms=None, tpot_ms=10, e2e_s=5)
    assert not slo.request_within(ttft_ms=1000, ttfo_ms=None, tpot_ms=20, e2e_s=5)
    assert not slo.request_within(ttft_ms=2001, ttfo_ms=None, tpot_ms=10, e2e_s=5)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "empty part"),
        ("ttft_p99<=2s,", "empty part"),
        ("ttft_p99 2s", "is not METRIC_STAT<=VALUE"),
        ("speed_p50>=3", "unknown metric 'speed'"),
        ("ttft_p99<=2", "needs a unit"),
        ("ttft_p99<=2h", "needs a unit"),
        ("ttft_p99>=2s", "bounded from above"),
        ("per_stream<=60", "bounded from below"),
        ("per_stream>=60ms", "tok/s"),
        ("ttft_p99<=0s", "positive and finite"),
        ("ttft_p99<=-1s", "positive and finite"),
        ("tpot_p50<=1e999ms", "positive and finite"),
        ("ttft_p99<=2s,ttft_p99<=3s", "twice"),
        ("ttft_p95<=2s", "unknown metric"),
    ],
)
def test_bad_slo_is_one_usage_line(text: str, said: str) -> None:
    """Every malformed SLO is one UsageError naming the problem, with a fix."""
    with pytest.raises(UsageError) as caught:
        parse_slo(text)
    message = str(caught.value)
    assert said in message
    assert "\n" not in message
    assert caught.value.fix


@given(st.text(max_size=60))
def test_any_text_parses_or_raises_usage_error(text: str) -> None:
    """No input makes the parser raise anything but UsageError."""
    try:
        slo = parse_slo(text)
    except UsageError:
        return
    assert parse_slo(slo.text()) == slo  # the canonical text reads back the same
