"""The one SLO (`analyze.slo`): parsing, canonical text, judging a point and a request, the
earlier bench form, a summary's block, and that it is the only SLO type in src."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from servekit.analyze.slo import Bound, parse_slo, slo_of_block
from servekit.cli.main import cli
from servekit.errors import UsageError
from servekit.records import RequestRecord
from servekit.results.summary import SloBlock


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


def test_the_earlier_bench_form_is_answered_with_the_same_bounds_at_p99() -> None:
    with pytest.raises(UsageError) as caught:
        parse_slo("ttft_ms=500, tpot_ms=50,e2e_s=2.5", option="--slo")
    assert caught.value.message == (
        "--slo 'ttft_ms=500, tpot_ms=50,e2e_s=2.5' is the earlier bench form "
        "(each request within every bound)"
    )
    assert caught.value.fix is not None
    assert "--slo 'ttft_p99<=500ms,tpot_p99<=50ms,e2e_p99<=2.5s'" in caught.value.fix
    rewritten = caught.value.fix.split("'")[1]
    assert parse_slo(rewritten).text() == "ttft_p99<=500ms,tpot_p99<=50ms,e2e_p99<=2.5s"
    for bad in ("ttft_ms=nan", "tpot_ms=0", "e2e_s=fast"):
        with pytest.raises(UsageError, match="needs a positive number"):
            parse_slo(bad)


def test_a_summary_block_reads_as_its_slo() -> None:
    assert slo_of_block(SloBlock(text="tpot_p50<=25ms")) == parse_slo("tpot_p50<=25ms")
    legacy = slo_of_block(SloBlock(ttft_ms=500, tpot_ms=None, e2e_s=10))
    assert legacy == parse_slo("ttft_p99<=500ms,e2e_p99<=10s")
    with pytest.raises(UsageError, match=r"^summary\.json slo 'fast'"):
        slo_of_block(SloBlock(text="fast"))


def _record(ttft_ms: float, tpot_ms: float, *, failed: bool = False) -> RequestRecord:
    sent, first = 1_000_000_000, 1_000_000_000 + int(ttft_ms * 1e6)
    last = first + int(tpot_ms * 1e6) * 9
    return RequestRecord(
        "r", "c=1", sent, sent, first, first, last + 1_000_000, chunk_ns=(first, last),
        chunk_tokens=(1, 9), output_tokens=10, error_kind="timeout" if failed else None,
    )  # fmt: skip


def test_a_request_meets_the_slo_by_its_own_figures() -> None:
    slo = parse_slo("ttft_p99<=500ms,tpot_p50<=20ms")
    assert slo.met_by(_record(400, 15))
    assert not slo.met_by(_record(600, 15))
    assert not slo.met_by(_record(400, 25))
    assert not slo.met_by(_record(400, 15, failed=True))
    assert _record(400, 15).ttft_ms == pytest.approx(400)
    assert _record(400, 15).tpot_ms == pytest.approx(15)


def test_bench_sim_run_and_tune_refuse_an_slo_with_the_same_line() -> None:
    """The three commands parse --slo with the one parser, before anything else is done:
    a malformed SLO (or the earlier bench form) is refused by each with the same line."""
    commands = (
        ["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--out", "x"],
        ["sim", "run", "--profile", "minimax-m3-mxfp8-8xa800", "--concurrency", "1"],
        ["tune", "minimax-m3-mxfp8-8xa800", "--out", "x"],
    )
    for text in ("ttft_p99<=2", "ttft_ms=500", "speed_p50>=3", "per_stream<=60"):
        lines = []
        for args in commands:
            result = CliRunner().invoke(cli, [*args, "--slo", text])
            assert result.exit_code == 2, (args, result.output)
            lines.append(result.stderr)
        expected = f"servekit: error: {_refusal(text)}\n"
        assert lines == [expected] * 3, (text, lines)


def _refusal(text: str) -> str:
    with pytest.raises(UsageError) as caught:
        parse_slo(text, option="--slo")
    return str(caught.value)


def test_there_is_one_slo_type_in_src() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "servekit"
    found = [
        f"{path.relative_to(src)}:{node.lineno}"
        for path in sorted(src.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name == "Slo"
    ]
    assert found == ["analyze/slo.py:" + found[0].split(":")[1]], found
