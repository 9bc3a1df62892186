"""The report's verdict (core): the few lines its first screen leads with.

Built from values only (run summaries, validate.json, recommendations), each line present
only when its data is: validation passed, or which checks failed; the SLO and the highest
load that meets it; the per-stream target and the highest concurrency that keeps it; the
recommended settings (compare's speculation advice, or a `servekit tune` winner passed in
as a `Recommendation`); per run the peak output throughput and the lowest load's latency,
TTFT and per-stream speed, and failed requests. The renderer escapes every text (labels are
directory names, check details quote model output).

What "met" means (docs/cli.md, report section):
- an SLO (`bench --slo`, `sim run --slo`: `analyze.slo`'s grammar) is met at a load, as
  tune judges one, when every bound holds on the load's distribution (`ttft_p99<=500ms`:
  the load's TTFT p99) and no request failed; a load whose client timing is invalid is
  not judged;
- the per-stream target is met at a concurrency when the mean per-stream speed (1000 /
  TPOT) reaches it; a load with failed requests or invalid timing is not judged (the same
  rule as compare's `highest_meeting`).
Each line names the highest load that meets it, and any lower load that does not.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servekit.analyze.compare import untrusted
from servekit.analyze.point_columns import report_load, report_number
from servekit.analyze.slo import Slo, slo_of_block
from servekit.report.document import Highlight, Section, Tone
from servekit.results.compare import Comparison
from servekit.results.summary import Summary, SummaryPoint
from servekit.results.validate import ValidateDocument

TITLE = "Verdict"
NAMED_FAILURES = 3  # failed checks named in the line; the rest are counted
DETAIL_CHARS = 80  # a failed check's detail is cut to this many characters

Labelled = Sequence[tuple[str, Summary]]
Judge = Callable[[SummaryPoint], bool | None]  # met, not met, or None: not judged


@dataclass(frozen=True, slots=True)
class VerdictLine:
    """One line of the verdict: what it is about, what it says, and whether that is good."""

    topic: str
    text: str
    tone: Tone = "info"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The report's answer in a few lines, most important first."""

    lines: tuple[VerdictLine, ...]


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Settings to deploy with: one headline, the settings that enact it, and where the
    advice comes from. `--compare` gives compare's speculation advice; a `servekit tune`
    passes its winner to `write_report(..., recommendation=...)`."""

    headline: str
    settings: tuple[str, ...] = ()
    source: str | None = None


def build_verdict(
    runs: Labelled,
    *,
    validate: ValidateDocument | None = None,
    per_stream_target: float | None = None,
    recommendations: Sequence[Recommendation] = (),
) -> Verdict:
    """The verdict of runs (label, summary), with validate's checks, the per-stream target
    and recommendations when there are any; a line only where its data exists."""
    lines: list[VerdictLine] = []
    if validate is not None:
        lines.append(validation_line(validate))
    lines += slo_lines(runs)
    if per_stream_target is not None and (line := per_stream_line(runs, per_stream_target)):
        lines.append(line)
    for recommendation in recommendations:
        lines += recommendation_lines(recommendation)
    lines += [headline_line(label, summary) for label, summary in runs if summary.points]
    return Verdict(tuple(lines))


def verdict_section(verdict: Verdict) -> Section:
    """The verdict as the report's first section: a highlighted box of its lines."""
    return Section(TITLE, highlights=[Highlight(x.topic, x.text, x.tone) for x in verdict.lines])


def _short(detail: str) -> str:
    """A check's detail on one line, cut to DETAIL_CHARS."""
    text = " ".join(detail.split())
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 3].rstrip() + "..."


def validation_line(doc: ValidateDocument) -> VerdictLine:
    """`passed (N checks: ...)`, or `FAILED: name (detail), ...` naming the failed checks."""
    counts = Counter(c.status for c in doc.checks)
    tally = ", ".join(f"{counts[s]} {s}" for s in ("pass", "fail", "warn", "skip") if counts[s])
    total = f"{len(doc.checks)} check{'s' if len(doc.checks) != 1 else ''}"
    failed = [c for c in doc.checks if c.status == "fail"]
    if doc.passed and not failed:
        return VerdictLine("validation", f"passed ({total}{': ' + tally if tally else ''})", "good")
    if not failed:
        return VerdictLine("validation", f"FAILED ({total}, none marked fail)", "bad")
    named = ", ".join(f"{c.name} ({_short(c.detail)})" for c in failed[:NAMED_FAILURES])
    more = f" and {len(failed) - NAMED_FAILURES} more" if len(failed) > NAMED_FAILURES else ""
    return VerdictLine(
        "validation", f"FAILED: {named}{more} ({len(failed)} of {total} failed)", "bad"
    )


def _load_order(point: SummaryPoint) -> tuple[int, float]:
    """Closed-loop loads by concurrency, then open-loop ones by rate, then a replay."""
    if point.schedule is None and point.concurrency is not None:
        return (0, float(point.concurrency))
    if point.schedule is None and point.rate_rps is not None:
        return (1, float(point.rate_rps))
    return (2, 0.0)


def _reach(points: Sequence[SummaryPoint], judge: Judge, unjudged: str) -> tuple[str, bool]:
    """The highest load `judge` says is met, with the lower loads it is not met at and the
    loads it cannot judge (`unjudged` says why); and whether any load meets it."""
    ordered = sorted(points, key=_load_order)
    judged = [(p, ok) for p in ordered if (ok := judge(p)) is not None]
    skipped = [report_load(p) for p in ordered if judge(p) is None]
    met = [p for p, ok in judged if ok]
    notes = []
    if met:
        top = met[-1]
        text = report_load(top)
        if top is ordered[-1]:
            notes.append("the highest measured")
        below = [report_load(p) for p, ok in judged if not ok and _load_order(p) < _load_order(top)]
        if below:
            notes.append(f"not at {', '.join(below)}")
    else:
        text = "not met at any measured load"
    if skipped:
        notes.append(f"not judged at {', '.join(skipped)}: {unjudged}")
    return text + (f" ({'; '.join(notes)})" if notes else ""), bool(met)


def _slo_judge(slo: Slo) -> Judge:
    """tune's rule: a load meets the SLO when every bound holds on its distribution and no
    request failed; a load whose client timing is invalid is not judged."""

    def judge(point: SummaryPoint) -> bool | None:
        if not point.client.valid:
            return None
        return point.failed == 0 and slo.judge(point).met

    return judge


def slo_lines(runs: Labelled) -> list[VerdictLine]:
    """Per SLO the runs were measured against: the highest load of each run that meets it."""
    groups: dict[str, tuple[Slo, list[tuple[str, Summary]]]] = {}
    for label, summary in runs:
        if (block := summary.workload.slo) is not None and (slo := slo_of_block(block)).bounds:
            groups.setdefault(slo.text(), (slo, []))[1].append((label, summary))
    lines = []
    for written, (slo, members) in groups.items():
        reached = [(label, *_reach(s.points, _slo_judge(slo), "invalid client timing"))
                   for label, s in members]  # fmt: skip
        runs_text = "; ".join(f"{label}: {text}" for label, text, _ in reached)
        rule = "met at a load when every bound holds and no request failed"
        tone: Tone = "good" if all(ok for _, _, ok in reached) else "bad"
        text = f"{written} ({rule}); highest load meeting it: {runs_text}"
        lines.append(VerdictLine("SLO", text, tone))
    return lines


def per_stream_line(runs: Labelled, target: float) -> VerdictLine | None:
    """The highest concurrency of each closed-loop run whose mean per-stream speed meets
    `target` tok/s; None when no run has a concurrency point."""

    def judge(point: SummaryPoint) -> bool | None:
        speed = point.per_stream_tok_s.mean
        if point.concurrency is None or speed is None or untrusted(point) is not None:
            return None
        return speed >= target

    reached = [
        (label, *_reach(closed, judge, "failed requests, invalid timing or no TPOT"))
        for label, s in runs
        if (closed := [p for p in s.points if p.concurrency is not None and p.schedule is None])
    ]
    if not reached:
        return None
    runs_text = "; ".join(f"{label}: {text}" for label, text, _ in reached)
    tone: Tone = "good" if all(ok for _, _, ok in reached) else "bad"
    text = (f">= {target:g} tok/s mean per stream (1000 / TPOT); highest concurrency "
            f"meeting it: {runs_text}")  # fmt: skip
    return VerdictLine("per-stream target", text, tone)


def recommendation_lines(recommendation: Recommendation) -> list[VerdictLine]:
    """The recommendation's headline (with its source), then one line per setting."""
    source = f" ({recommendation.source})" if recommendation.source else ""
    lines = [VerdictLine("recommended", recommendation.headline + source)]
    lines += [VerdictLine("setting", setting) for setting in recommendation.settings]
    return lines


def comparison_recommendation(doc: Comparison, *, a: str, b: str) -> Recommendation | None:
    """compare's speculation advice as a recommendation (None when it gives none): the
    advice, and the vLLM setting that enacts it when there is one."""
    advice = doc.speculation
    if advice is None:
        return None
    settings: tuple[str, ...] = ()
    if (config := advice.speculative_config) is not None:
        steps = json.dumps([list(step) for step in config.num_speculative_tokens_per_batch_size])
        settings = (f'"num_speculative_tokens_per_batch_size": {steps} in --speculative-config',)
    return Recommendation(advice.recommendation, settings, f"compare: B = {b} against A = {a}")


def headline_line(label: str, summary: Summary) -> VerdictLine:
    """A run's headline figures: peak output throughput and its load; the lowest load's mean
    latency, TTFT p50 and per-stream p50; failed requests when there are any."""
    points = summary.points
    peak = max(points, key=lambda p: p.output_throughput_tok_s)
    low = min(points, key=_load_order)
    one, three = report_number(1), report_number(3)
    text = (
        f"peak {one(peak.output_throughput_tok_s)} output tok/s at {report_load(peak)}; "
        f"at {report_load(low)}: mean latency {three(low.latency_s.mean)} s, "
        f"TTFT p50 {one(low.ttft_ms.p50)} ms, per-stream p50 {one(low.per_stream_tok_s.p50)} tok/s"
    )
    failed = sum(p.failed for p in points)
    if not failed:
        return VerdictLine(label, text)
    sent = failed + sum(p.completed for p in points)
    return VerdictLine(label, f"{text}; {failed} of {sent} requests failed", "bad")
