"""compare on hand-built summaries: known deltas, verdicts, crossover and advice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.analyze import compare
from servekit.analyze.compare import delta
from servekit.cli.main import cli
from servekit.results.summary import SummaryPoint, load_summary


def compare_runs(a: dict[str, Any], b: dict[str, Any], **options: Any) -> dict[str, Any]:
    """compare_runs on two hand-built summaries (previous format), as JSON."""
    return compare.compare_runs(load_summary(a), load_summary(b), **options).as_json()


def highest_meeting(run: dict[str, Any], target: float) -> int | None:
    """highest_meeting on a hand-built summary (previous format)."""
    return compare.highest_meeting(load_summary(run), target)


def points(*docs: dict[str, Any]) -> list[SummaryPoint]:
    """Hand-built points (previous format) as typed points."""
    return load_summary({"points": list(docs)}).points


def point(c: int, tput: float, lat: float, *, ci: float = 0.01, spec: bool = False,
          per_stream: float | None = None) -> dict[str, Any]:  # fmt: skip
    """A summary point with a mean latency interval of +-ci (relative)."""
    return {
        "concurrency": c, "rate_rps": None, "output_throughput_tok_s": tput,
        "latency_s": {"mean": lat, "p50": lat, "p99": lat * 1.5,
                      "ci95": {"mean": [lat * (1 - ci), lat * (1 + ci)]}},
        "ttft_ms": {"mean": 100.0, "p99": 150.0}, "tpot_ms": {"mean": lat * 1000 / 128},
        "per_stream_tok_s": {"mean": per_stream if per_stream is not None else 128 / lat},
        "server": {"spec_acceptance_length": 2.8 if spec else None,
                   "spec_acceptance_per_position": [0.8, 0.6, 0.4] if spec else None},
    }  # fmt: skip


# EAGLE3 off (A) and on (B): on is faster at 1 and 4, no better at 8, worse at 16 and 128.
OFF = {"points": [point(1, 60, 2.13), point(4, 150, 3.41), point(8, 260, 3.9),
                  point(16, 420, 4.9), point(128, 1000, 16.4)]}  # fmt: skip
ON = {"points": [point(1, 83, 1.54, spec=True), point(4, 210, 2.44, spec=True),
                 point(8, 259, 3.91, spec=True), point(16, 400, 5.12, spec=True),
                 point(128, 924, 17.7, spec=True)]}  # fmt: skip


def test_known_deltas_and_verdicts() -> None:
    """Per load: B's change against A in percent, with better/worse/within-noise verdicts."""
    doc = compare_runs(OFF, ON, spec_name="EAGLE3", max_batch=128, spec_tokens=3)
    rows = {r["load"]: r["deltas"] for r in doc["points"]}
    assert list(rows) == ["c=1", "c=4", "c=8", "c=16", "c=128"]
    assert rows["c=1"]["output_throughput_tok_s"]["delta_pct"] == pytest.approx(38.33, abs=0.01)
    assert rows["c=1"]["output_throughput_tok_s"]["verdict"] == "better"
    assert rows["c=1"]["latency_s.mean"]["delta_pct"] == pytest.approx(-27.7, abs=0.05)
    assert rows["c=1"]["latency_s.mean"]["verdict"] == "better"
    assert rows["c=8"]["output_throughput_tok_s"]["verdict"] == "within noise"
    assert rows["c=8"]["latency_s.mean"]["verdict"] == "within noise"
    assert rows["c=16"]["output_throughput_tok_s"]["verdict"] == "worse"
    assert rows["c=128"]["latency_s.p99"]["verdict"] == "worse"


def test_crossover_and_the_speculation_advice() -> None:
    """The crossover sits between the last better and the first worse load; the advice
    enables EAGLE3 up to 4, states the cost above and the dynamic-SD setting."""
    doc = compare_runs(OFF, ON, spec_name="EAGLE3", max_batch=128, spec_tokens=3)
    assert doc["crossover"] == "between c=4 and c=16: B is better below, worse above"
    spec = doc["speculation"]
    assert spec["run"] == "B"
    assert spec["enable_up_to_concurrency"] == 4
    assert spec["recommendation"] == (
        "enable EAGLE3 at concurrency <= 4; above that it costs 0-8% throughput"
    )
    assert spec["speculative_config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 4, 3], [5, 128, 0]]  # fmt: skip


def test_advice_is_symmetric_in_the_order_of_runs() -> None:
    """With the speculative run as A, the advice is the same."""
    swapped = compare_runs(ON, OFF, spec_name="EAGLE3", max_batch=128, spec_tokens=3)
    assert swapped["speculation"]["run"] == "A"
    assert swapped["speculation"]["enable_up_to_concurrency"] == 4


def scaled(run: dict[str, Any], factor: float) -> dict[str, Any]:
    """The run with speculation, `factor` times its throughput at every load."""
    return {"points": [point(p["concurrency"], p["output_throughput_tok_s"] * factor,
                             p["latency_s"]["mean"] / factor, spec=True)
                       for p in run["points"]]}  # fmt: skip


def test_advice_when_speculation_always_or_never_helps() -> None:
    """Always better: keep it on; better nowhere: disable it."""
    always = compare_runs(OFF, scaled(OFF, 1.3))
    assert always["speculation"]["recommendation"].startswith("keep speculative decoding on")
    never = compare_runs(OFF, scaled(OFF, 0.8))
    assert never["speculation"]["recommendation"].startswith("disable speculative decoding")
    assert never["crossover"] is None


def test_noise_without_intervals_uses_two_percent() -> None:
    """A statistic without an interval counts as changed beyond 2%."""
    a, b = points({"output_throughput_tok_s": 100.0, "ttft_ms": {"mean": 100.0}},
                  {"output_throughput_tok_s": 101.5, "ttft_ms": {"mean": 97.0}})  # fmt: skip
    assert delta("t", a, b, "output_throughput_tok_s", None, True).verdict == "within noise"
    assert delta("f", a, b, "ttft_ms", "mean", False).verdict == "better"


def test_per_stream_target() -> None:
    """The highest concurrency whose mean per-stream speed meets the target."""
    run = {"points": [point(1, 80, 1.5, per_stream=80), point(2, 130, 1.9, per_stream=65),
                      point(4, 200, 2.5, per_stream=50)]}  # fmt: skip
    assert highest_meeting(run, 60) == 2
    assert highest_meeting(run, 90) is None


def test_compare_cli(tmp_path: Path) -> None:
    """The command reads two run directories, prints the advice, and --json has it all."""
    for name, run in (("off", OFF), ("on", ON)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(run), encoding="utf-8")
    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "off"), str(tmp_path / "on"),
                                      "--per-stream-target", "60"])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "enable speculative decoding at concurrency <= 4" in result.stdout
    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "off"), str(tmp_path / "on"),
                                      "--json"])  # fmt: skip
    assert json.loads(result.stdout)["speculation"]["enable_up_to_concurrency"] == 4
    bad = CliRunner().invoke(cli, ["compare", str(tmp_path), str(tmp_path / "on")])
    assert bad.exit_code == 1
    assert "summary.json" in bad.stderr


def failing(p: dict[str, Any], failed: int, output_tokens_s: float) -> dict[str, Any]:
    """The point with `failed` failed requests and a (meaningless) throughput."""
    return dict(p, failed=failed, completed=2, output_throughput_tok_s=output_tokens_s)


def test_points_with_failed_requests_never_feed_the_advice() -> None:
    """A load where one run's requests failed (or its timing is invalid) is shown but not
    judged: the advice, crossover and per-stream target come from the trusted loads only."""
    # B at c=16 "wins" by 50% only because most requests failed (e.g. negative usage counts)
    on = {"points": [*ON["points"][:3], failing(ON["points"][3], 14, 630.0), ON["points"][4]]}
    doc = compare_runs(OFF, on, spec_name="EAGLE3", max_batch=128, spec_tokens=3)
    rows = {r["load"]: r for r in doc["points"]}
    assert rows["c=16"]["excluded"] == "B: 14 of 16 requests failed"
    assert rows["c=4"]["excluded"] is None
    spec = doc["speculation"]
    assert spec["enable_up_to_concurrency"] == 4
    assert [load for load, _ in spec["gains_pct"]] == [1, 4, 8, 128]
    assert spec["recommendation"].endswith(
        "(not judged at c=16: failed requests or invalid timing)"
    )
    assert doc["crossover"] == "between c=4 and c=128: B is better below, worse above"
    invalid = dict(ON["points"][0], client={"valid": False, "warnings": ["event-loop lag 80 ms"]})
    lagging = compare_runs(OFF, {"points": [invalid, *ON["points"][1:]]})
    assert lagging["points"][0]["excluded"] == "B: client timing not valid (event-loop lag 80 ms)"
    assert highest_meeting({"points": [failing(point(4, 200, 2.5, per_stream=50), 1, 200)]},
                           40) is None  # fmt: skip


def test_no_trusted_load_gives_no_advice() -> None:
    """When every load has failed requests, the advice says it cannot judge, not 'disable'."""
    broken = {"points": [failing(p, 3, 999.0) for p in ON["points"]]}
    spec = compare_runs(OFF, broken)["speculation"]
    assert spec["enable_up_to_concurrency"] is None
    assert spec["recommendation"].startswith("no advice on speculative decoding")
