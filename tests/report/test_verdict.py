"""The report's verdict: each line present or absent by its data, the "met" rules, the exact
text of a compared sim pair (golden), and its place as the report's first section.

The runs are real `servekit sim run` and `servekit bench` outputs checked in under data/
(data/README.md gives the commands); an SLO is added to a copy of one where a line needs
one, with the TTFT p99 each case needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servekit.analyze.compare import highest_meeting
from servekit.bench.store import read_summary, read_validate
from servekit.report.build import comparison, load_run, write_report
from servekit.report.document import render_html, render_markdown
from servekit.report.verdict import (
    TITLE,
    Recommendation,
    VerdictLine,
    build_verdict,
    comparison_recommendation,
    verdict_section,
)
from servekit.results.summary import SloBlock, Summary
from servekit.results.validate import ValidateDocument, load_validate

HERE = Path(__file__).parent
DATA = HERE / "data"
GOLDEN_DIR = HERE / "golden"
SLO = SloBlock(text="ttft_p99<=500ms,tpot_p99<=1s")
SLO_RULE = "met at a load when every bound holds and no request failed"
MEETS, MISSES = 400.0, 600.0  # a point's TTFT p99 (ms) against the SLO's 500


def _summary(run: str) -> Summary:
    return read_summary(DATA / run)


def _with_slo(
    summary: Summary, ttft_p99: list[float], *, invalid: int | None = None, slo: SloBlock = SLO
) -> Summary:
    """The summary measured against `slo`, its points' TTFT p99 set in order (the point at
    index `invalid` marked as invalid client timing)."""
    points = []
    for i, (point, p99) in enumerate(zip(summary.points, ttft_p99, strict=True)):
        update: dict[str, object] = {"ttft_ms": point.ttft_ms.model_copy(update={"p99": p99})}
        if i == invalid:
            update["client"] = point.client.model_copy(update={"valid": False})
        points.append(point.model_copy(update=update))
    workload = summary.workload.model_copy(update={"slo": slo})
    return summary.model_copy(update={"workload": workload, "points": points})


def _topics(lines: tuple[VerdictLine, ...]) -> list[str]:
    return [line.topic for line in lines]


def _line(lines: tuple[VerdictLine, ...], topic: str) -> VerdictLine:
    (found,) = [line for line in lines if line.topic == topic]
    return found


def _validate(*checks: tuple[str, str, str]) -> ValidateDocument:
    failed = any(status == "fail" for _, status, _ in checks)
    return load_validate({
        "passed": not failed,
        "checks": [{"name": n, "status": s, "detail": d, "duration_s": 0.1} for n, s, d in checks],
    })  # fmt: skip


def test_golden_verdict_of_a_compared_sim_pair(golden: Callable[[str, Path], None]) -> None:
    """EAGLE3 off (A) against on (B), validate.json with a failed ladder, the profile's
    60 tok/s target: the verdict's Markdown and HTML match their golden files exactly."""
    a, b = load_run(DATA / "sim-m3-no-eagle3"), load_run(DATA / "sim-m3")
    advice = comparison_recommendation(comparison(a, b, 60.0), a=a.label, b=b.label)
    assert advice is not None
    verdict = build_verdict(
        [(b.label, b.summary), (a.label, a.summary)],
        validate=read_validate(DATA / "validate-llama.json"),
        per_stream_target=60.0,
        recommendations=[advice],
    )
    sections = [verdict_section(verdict)]
    golden(render_markdown("verdict", sections), GOLDEN_DIR / "verdict-sim-m3.md")
    golden(render_html("verdict", sections), GOLDEN_DIR / "verdict-sim-m3.html")


def test_headline_figures_only_without_other_data() -> None:
    """A run alone (no validate, SLO, target or advice) gives one headline line: peak output
    throughput and its load, the lowest load's mean latency, TTFT p50, per-stream p50."""
    verdict = build_verdict([("sim-m3", _summary("sim-m3"))])
    assert verdict.lines == (
        VerdictLine(
            "sim-m3",
            "peak 393.9 output tok/s at c=16; at c=1: mean latency 1.631 s, TTFT p50 58.2 ms, "
            "per-stream p50 81.0 tok/s",
        ),
    )


def test_headline_counts_failed_requests_and_open_loop_loads() -> None:
    """Failed requests are counted (the line turns bad); an open-loop run names its rates."""
    faulty = build_verdict([("faulty", _summary("bench-faulty"))]).lines[0]
    assert faulty.tone == "bad"
    assert faulty.text.endswith("; 24 of 28 requests failed")
    assert "per-stream p50 - tok/s" in faulty.text  # no successful stream: no figure
    rate = build_verdict([("rate", _summary("sim-m3-rate"))]).lines[0]
    assert rate.text.startswith("peak 222.9 output tok/s at rate=2.0; at rate=0.5: ")


def test_validation_passed_counts_the_checks() -> None:
    """A passing validate.json says so, with the checks by status."""
    doc = _validate(("health", "pass", "200"), ("reasoning", "warn", "x"), ("long", "skip", "y"))
    line = build_verdict([], validate=doc).lines[0]
    assert line == VerdictLine("validation", "passed (3 checks: 1 pass, 1 warn, 1 skip)", "good")


def test_validation_failed_names_the_failed_checks_with_short_details() -> None:
    """A failing validate.json names its first three failed checks with their details cut
    to one short line, and counts the rest."""
    long = "garbage at concurrency 4 although every response was HTTP 200:\n" + "x" * 100
    doc = _validate(("health", "pass", "ok"), ("ladder", "fail", long), ("chat", "fail", "NaN"),
                    ("tools", "fail", "no call"), ("stream", "fail", "cut"),
                    ("spec", "fail", "none"))  # fmt: skip
    line = build_verdict([], validate=doc).lines[0]
    assert line.tone == "bad"
    assert line.text == (
        "FAILED: ladder (garbage at concurrency 4 although every response was HTTP 200: "
        "xxxxxxxxxxxxxx...), chat (NaN), tools (no call) and 2 more (5 of 6 checks failed)"
    )
    assert len(line.text.split(" (", 1)[1].split("), ", 1)[0]) == 80  # DETAIL_CHARS


def test_validation_line_of_the_checked_in_validate_json() -> None:
    """The simulator's corrupt-at-concurrency fault: the ladder is named as failed."""
    doc = read_validate(DATA / "validate-llama.json")
    line = build_verdict([], validate=doc).lines[0]
    assert line.text.startswith("FAILED: ladder (garbage at concurrency 4 ")
    assert line.text.endswith("(1 of 10 checks failed)")


def test_slo_met_up_to_a_load() -> None:
    """The SLO line states the bounds and the rule, and the highest load that meets it."""
    summary = _with_slo(_summary("sim-m3"), [MEETS, 500.0, MISSES])
    line = _line(build_verdict([("on", summary)]).lines, "SLO")
    assert line.tone == "good"
    assert line.text == (
        f"ttft_p99<=500ms,tpot_p99<=1s ({SLO_RULE}); highest load meeting it: on: c=4"
    )


def test_slo_is_not_met_where_a_request_failed() -> None:
    """Every bound holding is not enough: a load where a request failed does not meet it."""
    summary = _with_slo(_summary("sim-m3"), [MEETS, MEETS, MEETS])
    points = list(summary.points)
    points[2] = points[2].model_copy(update={"failed": 1})
    line = _line(
        build_verdict([("on", summary.model_copy(update={"points": points}))]).lines, "SLO"
    )
    assert line.text.endswith("on: c=4")


def test_an_earlier_summarys_bounds_read_as_p99() -> None:
    """A summary written before the one grammar (bench's ttft_ms=500) is judged at p99."""
    legacy = SloBlock(ttft_ms=500, tpot_ms=1000, e2e_s=None)
    summary = _with_slo(_summary("sim-m3"), [MEETS, 500.0, MISSES], slo=legacy)
    line = _line(build_verdict([("on", summary)]).lines, "SLO")
    assert line.text.startswith("ttft_p99<=500ms,tpot_p99<=1s (")
    assert line.text.endswith("on: c=4")


def test_slo_met_at_every_load_says_the_limit_was_not_reached() -> None:
    """Met at the highest measured load: the line says so (the limit lies beyond)."""
    summary = _with_slo(_summary("sim-m3"), [MEETS, MEETS, MEETS])
    assert _line(build_verdict([("on", summary)]).lines, "SLO").text.endswith(
        "on: c=16 (the highest measured)"
    )


def test_slo_not_met_at_any_load() -> None:
    """No load meets the SLO: `not met at any measured load`, and the line is bad."""
    summary = _with_slo(_summary("sim-m3"), [MISSES, MISSES, MISSES])
    line = _line(build_verdict([("on", summary)]).lines, "SLO")
    assert line.tone == "bad"
    assert line.text.endswith("on: not met at any measured load")


def test_slo_names_lower_misses_and_unjudged_loads() -> None:
    """Met at c=4 but not at c=1 (said), and c=16 with invalid client timing not judged."""
    summary = _with_slo(_summary("sim-m3"), [MISSES, MEETS, MEETS], invalid=2)
    text = _line(build_verdict([("on", summary)]).lines, "SLO").text
    assert text.endswith("on: c=4 (not at c=1; not judged at c=16: invalid client timing)")


def test_slo_of_two_runs_and_an_open_loop_run() -> None:
    """Runs with the same SLO share its line; an open-loop run names its rate; a run
    without an SLO is left out of it."""
    on = _with_slo(_summary("sim-m3"), [MEETS, MEETS, MISSES])
    rate = _with_slo(_summary("sim-m3-rate"), [MEETS, MISSES])
    lines = build_verdict([("on", on), ("rate", rate), ("off", _summary("sim-m3-no-eagle3"))])
    line = _line(lines.lines, "SLO")
    assert line.text.endswith("highest load meeting it: on: c=4; rate: rate=0.5")
    assert "off" not in line.text


def test_no_slo_no_target_no_validation_no_advice_lines() -> None:
    """Without their data the SLO, per-stream, validation and recommendation lines are absent."""
    lines = build_verdict([("on", _summary("sim-m3")), ("off", _summary("sim-m3-no-eagle3"))])
    assert _topics(lines.lines) == ["on", "off"]


def test_per_stream_target_line_agrees_with_compare() -> None:
    """The highest concurrency whose mean per-stream speed meets the target is compare's
    `highest_meeting`; a run that never meets it says so."""
    on, off = _summary("sim-m3"), _summary("sim-m3-no-eagle3")
    assert (highest_meeting(on, 50.0), highest_meeting(off, 50.0)) == (4, 1)
    line = _line(build_verdict([("on", on), ("off", off)], per_stream_target=50.0).lines,
                 "per-stream target")  # fmt: skip
    assert line.tone == "good"
    assert line.text == (
        ">= 50 tok/s mean per stream (1000 / TPOT); highest concurrency meeting it: "
        "on: c=4; off: c=1"
    )
    line = _line(build_verdict([("off", off)], per_stream_target=80.0).lines, "per-stream target")
    assert line.tone == "bad"
    assert line.text.endswith("off: not met at any measured load")


def test_per_stream_target_skips_open_loop_runs_and_failed_loads() -> None:
    """Only concurrency points are judged: an open-loop run alone gives no line; a load
    with failed requests is not judged."""
    rate = build_verdict([("rate", _summary("sim-m3-rate"))], per_stream_target=50.0)
    assert _topics(rate.lines) == ["rate"]
    line = _line(build_verdict([("faulty", _summary("bench-faulty"))], per_stream_target=1.0).lines,
                 "per-stream target")  # fmt: skip
    assert line.text.endswith(
        "faulty: not met at any measured load (not judged at c=1, c=2: failed requests, "
        "invalid timing or no TPOT)"
    )


def test_compare_advice_is_the_recommended_setting() -> None:
    """compare's speculation advice becomes the recommendation and its vLLM setting."""
    a, b = load_run(DATA / "sim-m3-no-eagle3"), load_run(DATA / "sim-m3")
    advice = comparison_recommendation(comparison(a, b, None), a=a.label, b=b.label)
    assert advice == Recommendation(
        "enable EAGLE3 at concurrency <= 1; above that it gains at most 4.8% (under the 5% "
        "that pays for the draft's memory) or costs 8% throughput",
        ('"num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 128, 0]] '
         "in --speculative-config",),
        "compare: B = sim-m3 against A = sim-m3-no-eagle3",
    )  # fmt: skip
    lines = build_verdict([], recommendations=[advice]).lines
    assert _topics(lines) == ["recommended", "setting"]
    assert lines[0].text.endswith("(compare: B = sim-m3 against A = sim-m3-no-eagle3)")


def test_compare_without_speculation_gives_no_recommendation() -> None:
    """Two runs that both (or neither) speculate: compare has no advice, nor has the verdict."""
    run = load_run(DATA / "sim-m3")
    assert comparison_recommendation(comparison(run, run, None), a="x", b="y") is None


def test_report_leads_with_the_verdict(tmp_path: Path) -> None:
    """report.html and report.md open with the verdict (before the runs table), in its box;
    a recommendation passed to write_report (tune's extension point) comes before
    compare's advice."""
    on, off = DATA / "sim-m3", DATA / "sim-m3-no-eagle3"
    winner = Recommendation("max_num_seqs 64", ("--max-num-seqs 64",), "servekit tune")
    write_report([on, off], tmp_path, compare=(off, on), validate=DATA / "validate-llama.json",
                 recommendation=winner)  # fmt: skip
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    headings = page.split("<h2>")[1:]
    assert headings[0].startswith(f'{TITLE}</h2>\n<div class="highlights">')
    assert headings[1].startswith("Runs</h2>")
    box = headings[0]
    assert box.index("validation:") < box.index("max_num_seqs 64 (servekit tune)")
    assert box.index("--max-num-seqs 64") < box.index("enable EAGLE3 at concurrency &lt;= 1")
    assert box.index("enable EAGLE3") < box.index("<strong>sim-m3:</strong> peak 393.9")
    assert '<li class="bad"><strong>validation:</strong> FAILED: ladder' in box
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    sections = markdown.split("\n## ")[1:]
    assert sections[0].startswith(f"{TITLE}\n\n> - **validation:** FAILED: ladder")
    assert "> - **recommended:** max\\_num\\_seqs 64 (servekit tune)" in sections[0]
    assert sections[1].startswith("Runs\n")
