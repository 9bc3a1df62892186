"""The report's `servekit tune` section (shell: draws its plot with matplotlib).

From tune.json: the recommendation the verdict leads with, the predicted-against-measured
table of the verified candidates, the finalists with their settings, and the Pareto plot
of throughput per GPU against per-stream speed (each finalist's ladder in its own colour,
the non-dominated points joined in black).
"""

from __future__ import annotations

from matplotlib.figure import Figure as MplFigure

from servekit.report import plots
from servekit.report.document import Figure, Section, Table
from servekit.report.verdict import Recommendation
from servekit.results.tune import TuneDocument


def tune_recommendation(doc: TuneDocument) -> Recommendation:
    """The winner as the verdict's recommended setting (tune's own verdict lines)."""
    lines = doc.verdict or [f"SLO {doc.slo}: no winner"]
    return Recommendation(headline=lines[0], settings=tuple(lines[1:]), source="servekit tune")


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def verification_table(doc: TuneDocument) -> Table:
    """Predicted against measured goodput per verified candidate."""
    rows = []
    for v in doc.verification:
        final = v.final_prediction
        rows.append([
            v.id,
            str(v.round),
            "yes" if v.fitted_on_own else "no (held out)",
            _number(v.predicted.load),
            _number(v.predicted.goodput_rps),
            _number(v.measured_load),
            _number(v.measured_goodput_rps) + (" (at least)" if v.lower_bound else ""),
            "-" if v.error is None else f"{v.error:+.1%}",
            "yes" if v.within_bound else "NO",
            "-" if final is None else _number(final.goodput_rps),
            v.detail or "",
        ])  # fmt: skip
    return Table(
        f"verified on the engine: goodput (req/s at the highest load meeting {doc.slo}), "
        f"bound {doc.verify_bound:.0%}",
        ["id", "round", "fitted on its own points", "predicted load", "predicted goodput",
         "measured load", "measured goodput", "error", "within bound", "after refit", "note"],
        rows,
    )  # fmt: skip


def finalists_table(doc: TuneDocument) -> Table:
    """The finalists, best first, with the settings that tell them apart."""
    by_id = {c.id: c for c in doc.candidates}
    rows = []
    for f in doc.finalists:
        c = by_id.get(f.id)
        p = c.prediction if c is not None else None
        rows.append([
            str(f.rank), f.id, c.label if c is not None else "",
            _number(p.load if p else None), _number(p.goodput_per_gpu if p else None),
            f"{f.ladder_tok_s_per_gpu:.1f}", f.note or "",
        ])  # fmt: skip
    return Table(
        f"finalists in the simulator ({doc.load_unit}; goodput per GPU in req/s)",
        ["rank", "id", "settings", "load", "goodput/GPU", "ladder tok/s/GPU", "note"],
        rows,
    )


def pareto_plot(doc: TuneDocument) -> MplFigure:
    """Each finalist's ladder and the Pareto front."""
    colours = plots.run_colours(len(doc.finalists))
    series = [
        plots.Series(
            f"#{f.rank} {f.id}",
            [p.per_stream_tok_s or 0.0 for p in f.ladder],
            [p.output_tok_s / _gpus(doc, f.id) for p in f.ladder],
            colour,
        )
        for f, colour in zip(doc.finalists, colours, strict=True)
    ]
    front = plots.Series(
        "Pareto front",
        [p.per_stream_tok_s for p in doc.pareto],
        [p.output_tok_s_per_gpu for p in doc.pareto],
        plots.TARGET_COLOUR,
        ":",
    )
    return plots.lines(
        [*series, front],
        title="Throughput per GPU against per-stream speed",
        xlabel="per-stream tok/s (median)",
        ylabel="output tok/s per GPU",
        log_x=False,
    )


def _gpus(doc: TuneDocument, ident: str) -> int:
    return next((c.gpus for c in doc.candidates if c.id == ident), 1) or 1


def tune_section(doc: TuneDocument) -> Section:
    """The whole section."""
    paragraphs = [
        f"servekit tune of {doc.profile} for SLO {doc.slo}: {doc.candidates_total:,} candidates, "
        f"{doc.feasible:,} feasible; the simulator's calibration: "
        + "; ".join(f"round {m.round} {m.source}" for m in doc.model_rounds),
    ]
    for search in doc.searches:
        if search.speculation:
            paragraphs.append(f"Speculation (round {search.round}): {search.speculation}.")
    tables = [finalists_table(doc)]
    if doc.verification:
        tables.insert(0, verification_table(doc))
    figures = []
    if doc.finalists:
        figures.append(
            Figure(
                "tune_pareto",
                "Pareto front: throughput per GPU against per-stream speed",
                plots.png(pareto_plot(doc)),
                "each finalist's load ladder in the simulator; the dotted black line joins the "
                "points no other point beats on both axes",
            )
        )
    code = [doc.winner.launch_command] if doc.winner is not None else []
    return Section("Tune", paragraphs, tables, code=code, figures=figures)
