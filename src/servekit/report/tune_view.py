"""`servekit tune` on the terminal (shell: draws on stdout and stderr with rich).

While it runs: news lines and the search's progress on stderr. At the end: the verdict
(its first line: the winner against the profile as it is), the finalists and the
verification (predicted against measured) on stdout, the tables fitted to the terminal
(legible at 80 columns).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servekit.results.tune import TuneDocument

_SHORT = {  # the settings' names in a candidate's label (tune.space.Settings.label)
    "max_num_seqs": "seqs",
    "max_num_batched_tokens": "batched",
    "speculative": "spec",
    "gpu_memory_utilization": "gmu",
    "estimate_cudagraphs": "graph-estimate",
    "tensor_parallel_size": "tp",
    "data_parallel_size": "dp",
    "enable_prefix_caching": "prefix-cache",
    "enable_chunked_prefill": "chunked",
    "max_model_len": "len",
}
AS_IS = "your profile as-is"


class TerminalEvents:
    """Tune's news and search progress on stderr (nothing when quiet)."""

    def __init__(self, *, quiet: bool = False, console: Console | None = None) -> None:
        self.quiet = quiet
        self.console = console or Console(file=sys.stderr, highlight=False, soft_wrap=True)
        self._stage: str | None = None

    def say(self, text: str) -> None:
        """One line of news."""
        if not self.quiet:
            self.console.print(f"tune: {escape(text)}")

    def progress(self, stage: str, done: int, total: int) -> None:
        """A stage's progress: a line when it starts and when it ends (and every tenth)."""
        if self.quiet:
            return
        step = max(total // 10, 1)
        if stage != self._stage or done == total or done % step == 0:
            self._stage = stage
            self.console.print(f"tune: {escape(stage)}: {done}/{total}")


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _goodput_at(rps: float, load: float | None) -> str:
    """Goodput and the load it is served at ('none met' when no load met the SLO)."""
    return "none met" if load is None else f"{rps:.4g} at {load:.4g}"


def tune_tables(doc: TuneDocument) -> list[Table]:
    """The finalists and the verification as tables that stay legible at 80 columns: the
    settings that tell the finalists apart in one column (wrapped, never cut), the figures
    in short columns explained by the caption."""
    settings = {c.id: c.settings for c in doc.candidates}
    predicted = {c.id: c.prediction for c in doc.candidates}
    as_is = doc.as_is.id if doc.as_is is not None else None
    rows = [settings.get(f.id, {}) for f in doc.finalists]
    varying = [k for k in (rows[0] if rows else {}) if len({str(r.get(k)) for r in rows}) > 1]
    finalists = Table(
        title="finalists (simulated at the full request count)",
        title_justify="left",
        caption_justify="left",
        caption=f"load: the highest meeting the SLO ({doc.load_unit}); req/s/GPU: goodput "
        "per GPU there; tok/s/GPU: mean output tokens/s per GPU over the ladder",
    )
    finalists.add_column("#", justify="right", overflow="fold")
    finalists.add_column("id", min_width=11, overflow="fold")
    finalists.add_column("settings that differ", ratio=1, overflow="fold")
    for column in ("load", "req/s/GPU", "tok/s/GPU"):
        finalists.add_column(column, justify="right", overflow="fold")
    for f, row in zip(doc.finalists, rows, strict=True):
        p = predicted.get(f.id)
        text = " ".join(f"{_SHORT.get(k, k)}={_value(row.get(k))}" for k in varying) or "-"
        notes = [n for n in (AS_IS if f.id == as_is else None, f.note) if n]
        finalists.add_row(
            str(f.rank),
            f.id,
            escape("\n".join([text, *(f"({n})" for n in notes)])),
            "-" if p is None or p.load is None else f"{p.load:.4g}",
            "-" if p is None else _number(p.goodput_per_gpu),
            f"{f.ladder_tok_s_per_gpu:.1f}",
        )
    tables = [finalists]
    if doc.verification:
        verify = Table(
            title="verified on the engine",
            title_justify="left",
            caption_justify="left",
            caption=f"goodput in req/s at the highest load meeting the SLO ({doc.load_unit}); "
            f"error: predicted / measured - 1; in bound: within {doc.verify_bound:.0%}",
        )
        verify.add_column("id", min_width=11, overflow="fold")
        verify.add_column("round", justify="right", overflow="fold")
        for column in ("predicted", "measured", "error", "in bound"):
            verify.add_column(column, justify="right", overflow="fold")
        for v in doc.verification:
            measured = (
                "failed"
                if v.status == "failed"
                else _goodput_at(v.measured_goodput_rps, v.measured_load)
            )
            verify.add_row(
                escape(v.id + ("\n(as-is)" if v.id == as_is else "")),
                str(v.round),
                _goodput_at(v.predicted.goodput_rps, v.predicted.load),
                measured + ("\n(at least)" if v.lower_bound else ""),
                "-" if v.error is None else f"{v.error:+.1%}",
                "yes" if v.within_bound else "NO",
            )
        tables.append(verify)
    return tables


def print_tune(doc: TuneDocument, out: Path, console: Console | None = None) -> None:
    """The verdict, the tables and where the files are."""
    console = console or Console(file=sys.stdout, highlight=False, soft_wrap=True)
    for line in doc.verdict:
        console.print(escape(line))
    for table in tune_tables(doc):
        console.print(table, soft_wrap=False)  # fitted to the terminal, caption wrapped
    if doc.winner is not None:
        console.print(f"launch: {escape(doc.winner.launch_command)}")
    console.print(f"written: {escape(str(out / 'tune.json'))}")
