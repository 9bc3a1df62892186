"""Build a report from run directories (shell): read runs, plot, write HTML, Markdown, PNGs.

`servekit report RUN... [--compare A B]`: each RUN is a directory written by `servekit
bench` or `servekit sim run` (summary.json, records.jsonl); a validate.json found in a
run directory (or given with --validate) adds the functional checks. The report leads with
its verdict (`report.verdict`); each run keeps one colour, assigned here in run order, in
every plot.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure as Canvas

from servekit import __version__
from servekit.analyze.compare import compare_runs, speculation_facts
from servekit.analyze.point_columns import (
    point_headers,
    point_rows,
    report_load,
    traffic_headers,
    traffic_rows,
)
from servekit.analyze.summarize import samples
from servekit.analyze.traffic_figures import TRAFFIC_FIGURES, change_text, shown_value, turn_note
from servekit.bench.store import (
    RECORDS_FILE,
    dropped_warning,
    load_records,
    read_summary,
    read_validate,
)
from servekit.errors import ServekitError
from servekit.hardware import lookup_gpu
from servekit.profiles import Profile, load_profile
from servekit.records import RequestRecord
from servekit.render.argv import environment, vllm_serve_command
from servekit.render.shell import quote_words
from servekit.report import plots
from servekit.report.document import Figure, Section, Table, render_html, render_markdown
from servekit.report.plots import Samples, Series
from servekit.report.traffic_view import (
    prefix_cache_section,
    schedule_section,
    sessions_section,
    turn_series,
)
from servekit.report.tune_section import tune_recommendation, tune_section
from servekit.report.verdict import (
    Recommendation,
    build_verdict,
    comparison_recommendation,
    verdict_section,
)
from servekit.results.compare import Comparison
from servekit.results.report import REPORT_VERSION, ReportDocument
from servekit.results.summary import Summary, SummaryPoint
from servekit.results.tune import TuneDocument
from servekit.results.validate import ValidateDocument


@dataclass(frozen=True, slots=True)
class Run:
    """One run to report."""

    label: str
    summary: Summary
    records: list[RequestRecord]
    profile: Profile | None


@dataclass(frozen=True, slots=True)
class Plot:
    """A drawn plot before it is encoded: a file name, a title, the figure and a caption."""

    name: str
    title: str
    canvas: Canvas
    caption: str

    def encoded(self) -> Figure:
        """The report's figure: the plot as PNG bytes."""
        return Figure(self.name, self.title, plots.png(self.canvas), self.caption)


Coloured = list[tuple[Run, str]]  # each run with its colour


def load_run(path: Path, *, warn: Callable[[str], None] = lambda _: None) -> Run:
    """Read a run directory (records are optional: summaries alone still plot).

    A torn last line of records.jsonl (a killed run) is skipped and `warn` is told.

    Raises:
        ServekitError: no readable summary.json, or records.jsonl is not valid.
    """
    summary = read_summary(path)
    run_dir = path if path.is_dir() else path.parent
    records: list[RequestRecord] = []
    if (run_dir / RECORDS_FILE).exists():
        read = load_records(run_dir)
        records = read.records
        if read.dropped:
            warn(dropped_warning(run_dir / RECORDS_FILE, read.dropped))
    return Run(run_dir.name, summary, records, summary_profile(summary))


def summary_profile(summary: Summary) -> Profile | None:
    """The profile a run's summary names, or None (none named, or one of another machine)."""
    name = summary.target.profile
    if not name:
        return None
    try:
        return load_profile(name)
    except ServekitError:
        return None


def _closed(run: Run) -> list[SummaryPoint]:
    return [p for p in run.summary.points if p.concurrency is not None]


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _f(value: float | None) -> float:
    return 0.0 if value is None else value


def _acceptance(point: SummaryPoint) -> float:
    return _f(point.server.spec_acceptance_length)


def points_table(run: Run) -> Table:
    """The deployment's table (concurrency, tok/s, mean latency) plus the other columns."""
    points = run.summary.points
    return Table(f"{run.label}: per load", point_headers("report"), point_rows(points, "report"))


def traffic_table(run: Run) -> Table | None:
    """The run's traffic figures per load, when some point has any."""
    points = run.summary.points
    header = traffic_headers(points)
    if not header:
        return None
    return Table(f"{run.label}: traffic per load", header, traffic_rows(points))


def traffic_sections(runs: list[Run]) -> list[Section]:
    """Prefix cache, sessions and agent loops, schedule: each when some run has it."""
    labelled = [(r.label, r.summary) for r in runs]
    found = (prefix_cache_section(labelled), sessions_section(labelled),
             schedule_section(labelled))  # fmt: skip
    return [s for s in found if s is not None]


def turn_plot(runs: Coloured) -> Plot | None:
    """Mean TTFT by turn index, each run in its colour; None without sessions."""
    lines = [(r.label, colour, series) for r, colour in runs if (series := turn_series(r.summary))]
    if not lines:
        return None
    return Plot(
        "ttft_by_turn",
        "TTFT by turn index",
        plots.by_run(lines, title="Mean TTFT by turn", xlabel="turn", ylabel="ms"),
        "mean time to first token of each turn index across a point's sessions",
    )


def provenance(run: Run) -> Section:
    """Where the numbers come from: versions, target, workload, launch command, GPUs."""
    s = run.summary
    target = s.target
    lines = [
        f"run: {run.label}",
        f"started: {s.started_at}  servekit {s.servekit_version}",
        f"target: {target.url or ('not known' if s.unknown else 'simulated')}  "
        f"model {target.model}  "
        f"server {target.server_version}  profile {target.profile}",
        f"workload: {json.dumps(s.workload.as_json(), sort_keys=True)}",
    ]
    if s.unknown:
        lines.append(f"not known (rebuilt from records alone): {'; '.join(s.unknown)}")
    if s.command:
        lines.append(f"command: {quote_words(s.command)}")
    if run.profile is not None:
        prof = run.profile
        env = " ".join(f"{k}={v}" for k, v in environment(prof).items())
        lines.append(f"launch: {env + ' ' if env else ''}{quote_words(vllm_serve_command(prof))}")
        lines.append(f"engine: {prof.engine.image} (vLLM {prof.engine.version})")
        try:
            gpu = lookup_gpu(prof.hardware.gpu)
            lines.append(
                f"GPUs: {prof.hardware.gpus_per_node * prof.hardware.nodes} x {gpu.name}, "
                f"{gpu.memory_mib:,} MiB, sm{gpu.sm}, HBM {gpu.hbm_gb_s:,.0f} GB/s"
            )
        except ServekitError:
            lines.append(f"GPUs: {prof.hardware.gpu} (not in servekit's catalog)")
    return Section(f"Provenance: {run.label}", code=lines)


def run_plots(runs: Coloured, per_stream_target: float | None) -> list[Plot]:
    """Throughput, latency, per-stream speed, distributions, acceptance and time series,
    each run in its colour (mean solid, p99 dashed)."""
    out = []
    closed = [(r, colour, pts) for r, colour in runs if (pts := _closed(r))]

    def series(
        label: str, pts: list[SummaryPoint], colour: str, ys: list[float], style: str = "-"
    ) -> Series:
        return Series(label, [float(p.concurrency or 0) for p in pts], ys, colour, style)

    if closed:
        throughput = [series(r.label, pts, c, [p.output_throughput_tok_s for p in pts])
                      for r, c, pts in closed]  # fmt: skip
        out.append(Plot("throughput", "Output throughput vs concurrency",
                        plots.lines(throughput, title="Output throughput", xlabel="concurrency",
                                    ylabel="tok/s"),
                        "total output tokens per second over each point"))  # fmt: skip
        latency = []
        for r, c, pts in closed:
            latency.append(series(f"{r.label} mean", pts, c, [_f(p.latency_s.mean) for p in pts]))
            latency.append(series(f"{r.label} p99", pts, c, [_f(p.latency_s.p99) for p in pts],
                                  "--"))  # fmt: skip
        out.append(Plot("latency", "Request latency vs concurrency",
                        plots.lines(latency, title="Latency", xlabel="concurrency",
                                    ylabel="seconds"),
                        "mean (solid) and p99 (dashed) end-to-end latency"))  # fmt: skip
        hline = (
            (per_stream_target, f"target {per_stream_target:g} tok/s")
            if per_stream_target
            else None
        )
        speed = [series(r.label, pts, c, [_f(p.per_stream_tok_s.mean) for p in pts])
                 for r, c, pts in closed]  # fmt: skip
        out.append(Plot("per_stream", "Per-stream speed vs concurrency",
                        plots.lines(speed, title="Per-stream speed", xlabel="concurrency",
                                    ylabel="tok/s per request", hline=hline),
                        "mean of 1000 / TPOT per request"))  # fmt: skip
        spec = [series(r.label, pts, c, [_acceptance(p) for p in pts])
                for r, c, pts in closed
                if any(p.server.spec_acceptance_length for p in pts)]  # fmt: skip
        if spec:
            out.append(Plot("acceptance", "Spec-decode acceptance vs concurrency",
                            plots.lines(spec, title="Acceptance length", xlabel="concurrency",
                                        ylabel="tokens per step"),
                            "1 + accepted / drafts, from server counters"))  # fmt: skip
    with_records = [(r, c, samples(x for x in r.records if x.ok)) for r, c in runs if r.records]
    if with_records:
        ttft = [Samples(r.label, s.ttft_ms, c) for r, c, s in with_records]
        out.append(Plot("ttft", "TTFT distribution",
                        plots.histograms(ttft, title="Time to first token", xlabel="ms"),
                        "every successful request of every point"))  # fmt: skip
        itl = [Samples(r.label, s.itl_ms, c) for r, c, s in with_records]
        out.append(Plot("itl", "ITL distribution",
                        plots.histograms(itl, title="Inter-token latency", xlabel="ms"),
                        "a chunk of k tokens after dt counts k samples of dt/k"))  # fmt: skip
    for r, colour in runs:
        panels = [
            (
                report_load(p),
                [row[0] for row in rows],
                [row[1] for row in rows],
                [row[2] for row in rows],
                [row[3] for row in rows],
            )
            for p in r.summary.points
            if (rows := p.server.samples)
        ]
        if panels:
            out.append(
                Plot(
                    f"server_{len(out)}",
                    f"Server KV usage and queues: {r.label}",
                    plots.over_time(panels, title=f"{r.label}: server over time", colour=colour),
                    "sampled from /metrics (or the simulator) every 0.25 s",
                )
            )
    return out


def comparison(a: Run, b: Run, per_stream_target: float | None) -> Comparison:
    """compare's document of B against A, with the profiles' speculation facts."""
    spec_name, max_batch, k = speculation_facts([a.profile, b.profile])
    return compare_runs(
        a.summary,
        b.summary,
        per_stream_target=per_stream_target,
        spec_name=spec_name,
        max_batch=max_batch,
        spec_tokens=k,
    )


def compare_section(a: Run, b: Run, doc: Comparison) -> Section:
    """The A/B comparison (`comparison`) with its plot and advice."""
    rows = [
        [row.load + (f" (not used for advice: {row.excluded})" if row.excluded else "")]
        + [
            f"{d.delta_pct:+.1f}% ({d.verdict})"
            if (d := row.deltas[key]).delta_pct is not None
            else "n/a"
            for key in (
                "output_throughput_tok_s",
                "latency_s.mean",
                "latency_s.p99",
                "ttft_ms.mean",
                "per_stream_tok_s.mean",
            )
        ]
        for row in doc.points
    ]
    paragraphs = [f"B = {b.label} against A = {a.label}."]
    if doc.crossover:
        paragraphs.append(f"Crossover: {doc.crossover}.")
    if spec := doc.speculation:
        paragraphs.append(f"Recommendation: {spec.recommendation}.")
        if spec.speculative_config:
            paragraphs.append(f"vLLM setting: {json.dumps(spec.speculative_config.as_json())}")
    if target := doc.per_stream_target:
        paragraphs.append(
            f"Highest concurrency at >= {target.tok_s:g} tok/s per stream: "
            f"A {target.A}, B {target.B}."
        )
    figure = Figure(
        "ab_deltas",
        "A/B: output throughput change per load",
        plots.png(
            plots.bars(
                [row.load for row in doc.points],
                [row.deltas["output_throughput_tok_s"].delta_pct or 0 for row in doc.points],
                title=f"{b.label} vs {a.label}",
                ylabel="% change in output tok/s",
            )
        ),
        "B relative to A",
    )
    table = Table(
        "B relative to A",
        ["load", "output tok/s", "mean latency", "p99 latency", "mean TTFT", "per-stream"],
        rows,
    )
    tables = [table]
    traffic = [
        [row.load, f.name + turn_note(t), shown_value(f, t.a), shown_value(f, t.b),
         change_text(t)]
        for row in doc.points
        for f in TRAFFIC_FIGURES
        if (t := row.deltas.get(f.name)) is not None
    ]  # fmt: skip
    if traffic:
        tables.append(Table("traffic figures, A and B", ["load", "figure", "A", "B", "change"],
                            traffic))  # fmt: skip
    return Section("A/B comparison", paragraphs, tables, figures=[figure])


def validate_section(doc: ValidateDocument) -> Section:
    """validate's checks (details quote model output: they are escaped by the renderer)."""
    rows = [[c.name, c.status, c.detail, f"{c.duration_s:.1f}"] for c in doc.checks]
    verdict = "passed" if doc.passed else "FAILED"
    return Section(
        "Functional validation",
        [f"validate {verdict}."],
        [Table("checks", ["check", "status", "detail", "s"], rows)],
    )


def write_report(
    paths: list[Path],
    out: Path,
    *,
    compare: tuple[Path, Path] | None = None,
    validate: Path | None = None,
    per_stream_target: float | None = None,
    recommendation: Recommendation | None = None,
    tune: TuneDocument | None = None,
    warn: Callable[[str], None] = lambda _: None,
) -> ReportDocument:
    """Write report.html, report.md and one PNG per plot into `out`; return what was written.

    The report leads with its verdict. `recommendation` is its recommended setting, before
    compare's advice when there is a comparison; `tune` (a tune.json) adds tune's section
    and makes its winner the first recommendation (a report of a tune alone needs no runs).
    `warn` hears of records skipped while reading the runs (a torn last line).
    """
    runs = [load_run(p, warn=warn) for p in paths]
    by_path = {p.resolve(): r for p, r in zip(paths, runs, strict=True)}
    if per_stream_target is None:
        per_stream_target = next(
            (
                r.profile.bench_defaults.per_stream_target_tok_s
                for r in runs
                if r.profile and r.profile.bench_defaults.per_stream_target_tok_s
            ),
            None,
        )
    recommendations = [recommendation] if recommendation is not None else []
    if tune is not None:
        recommendations.insert(0, tune_recommendation(tune))
    tables = [points_table(r) for r in runs]
    tables += [t for r in runs if (t := traffic_table(r)) is not None]
    sections = [tune_section(tune)] if tune is not None else []
    if tables:
        sections.append(Section("Runs", tables=tables))
    if compare is not None:
        a, b = (by_path.get(p.resolve()) or load_run(p, warn=warn) for p in compare)
        doc = comparison(a, b, per_stream_target)
        sections.append(compare_section(a, b, doc))
        if (advice := comparison_recommendation(doc, a=a.label, b=b.label)) is not None:
            recommendations.append(advice)
    validate_doc = _find_validate(paths, validate)
    if validate_doc is not None:
        sections.append(validate_section(validate_doc))
    verdict = build_verdict([(r.label, r.summary) for r in runs], validate=validate_doc,
                            per_stream_target=per_stream_target,
                            recommendations=recommendations)  # fmt: skip
    sections.insert(0, verdict_section(verdict))
    sections += traffic_sections(runs)
    coloured = list(zip(runs, plots.run_colours(len(runs)), strict=True))
    drawn = run_plots(coloured, per_stream_target)
    if (by_turn := turn_plot(coloured)) is not None:
        drawn.append(by_turn)
    if drawn:
        sections.append(Section("Plots", figures=[plot.encoded() for plot in drawn]))
    sections += [provenance(r) for r in runs]
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    names = [r.label for r in runs] or ([f"tune of {tune.profile}"] if tune is not None else [])
    title = f"servekit report: {', '.join(names)} ({stamp}, servekit {__version__})"
    out.mkdir(parents=True, exist_ok=True)
    figures = [f for s in sections for f in s.figures]
    for fig in figures:
        (out / f"{fig.name}.png").write_bytes(fig.png)
    (out / "report.html").write_text(render_html(title, sections), encoding="utf-8")
    (out / "report.md").write_text(render_markdown(title, sections), encoding="utf-8")
    return ReportDocument(
        schema_version=REPORT_VERSION,
        html=str(out / "report.html"),
        markdown=str(out / "report.md"),
        plots=tuple(str(out / f"{f.name}.png") for f in figures),
    )


def _find_validate(paths: list[Path], given: Path | None) -> ValidateDocument | None:
    candidates = (
        [given / "validate.json" if given.is_dir() else given]
        if given
        else [(p if p.is_dir() else p.parent) / "validate.json" for p in paths]
    )
    for path in candidates:
        if path.exists():
            return read_validate(path)
    if given is not None:
        raise ServekitError(f"no validate.json at {given}", fix="pass validate --out DIR's DIR")
    return None
