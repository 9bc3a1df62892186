"""`servekit tune` on the terminal (shell: draws on stdout and stderr with rich).

While it runs: news lines and the search's progress on stderr. At the end: the verdict,
the finalists and the verification (predicted against measured) on stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servekit.results.tune import TuneDocument

_SHORT = {
    "max_num_seqs": "seqs",
    "max_num_batched_tokens": "batched",
    "speculative": "spec",
    "gpu_memory_utilization": "gmu",
    "estimate_cudagraphs": "graph est.",
    "tensor_parallel_size": "tp",
    "data_parallel_size": "dp",
    "enable_prefix_caching": "prefix cache",
    "enable_chunked_prefill": "chunked",
    "max_model_len": "max len",
}


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


def tune_tables(doc: TuneDocument) -> list[Table]:
    """The finalists and the verification as tables."""
    settings = {c.id: c.settings for c in doc.candidates}
    predicted = {c.id: c.prediction for c in doc.candidates}
    rows = [settings.get(f.id, {}) for f in doc.finalists]
    varying = [k for k in (rows[0] if rows else {}) if len({str(r.get(k)) for r in rows}) > 1]
    finalists = Table(title="finalists (simulated at the full request count)")
    for column in ("rank", "id", *varying, "load", "goodput/GPU", "ladder tok/s/GPU", "note"):
        finalists.add_column(_SHORT.get(column, column))
    for f, row in zip(doc.finalists, rows, strict=True):
        p = predicted.get(f.id)
        finalists.add_row(
            str(f.rank),
            f.id,
            *(escape(str(row.get(k))) for k in varying),
            "-" if p is None or p.load is None else f"{p.load:g}",
            "-" if p is None else f"{p.goodput_per_gpu:.4g}",
            f"{f.ladder_tok_s_per_gpu:.1f}",
            escape(f.note or ""),
        )
    tables = [finalists]
    if doc.verification:
        verify = Table(
            title="verified on the engine (goodput: req/s at the highest load meeting the SLO)"
        )
        for column in (
            "id",
            "round",
            "predicted load",
            "predicted",
            "measured load",
            "measured",
            "error",
            "within bound",
        ):
            verify.add_column(column)
        for v in doc.verification:
            verify.add_row(
                v.id,
                str(v.round),
                "-" if v.predicted.load is None else f"{v.predicted.load:g}",
                f"{v.predicted.goodput_rps:.4g}",
                "-" if v.measured_load is None else f"{v.measured_load:g}",
                f"{v.measured_goodput_rps:.4g}" + (" (at least)" if v.lower_bound else ""),
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
        console.print(table)
    if doc.winner is not None:
        console.print(f"launch: {escape(doc.winner.launch_command)}")
    console.print(f"written: {escape(str(out / 'tune.json'))}")
