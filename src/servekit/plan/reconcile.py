"""Planned versus actual (core): line a memory plan up against a parsed vLLM startup log."""

from __future__ import annotations

from dataclasses import dataclass

from servekit.plan.fit import MemoryPlan
from servekit.plan.startup_log import LogFailure, StartupFigures
from servekit.results.plan import FromLog, LoggedFailure, LoggedFigure
from servekit.units import to_gib


@dataclass(frozen=True, slots=True)
class ReconcileRow:
    """One figure, as planned and as the engine logged it."""

    name: str
    unit: str
    planned: float
    actual: float | None

    @property
    def delta_pct(self) -> float | None:
        """(planned - actual) / actual in percent, None when the log lacks the figure."""
        if self.actual is None or self.actual == 0:
            return None
        return (self.planned - self.actual) / abs(self.actual) * 100


def reconcile(plan: MemoryPlan, figures: StartupFigures) -> list[ReconcileRow]:
    """Return planned-versus-logged rows for the figures vLLM prints at startup."""
    graph_actual = figures.graph_capture_gib
    if graph_actual is None:
        graph_actual = figures.estimated_cuda_graph_gib
    return [
        ReconcileRow("weights", "GiB", to_gib(plan.weights.total_bytes), figures.weights_gib),
        ReconcileRow("KV cache", "GiB", to_gib(plan.kv_cache_bytes), figures.available_kv_gib),
        ReconcileRow("CUDA graphs", "GiB", to_gib(plan.graphs.total_bytes), graph_actual),
        ReconcileRow(
            "KV cache tokens",
            "tokens",
            float(plan.kv_cache_tokens),
            None if figures.kv_cache_tokens is None else float(figures.kv_cache_tokens),
        ),
        ReconcileRow(
            "max concurrency",
            "x",
            plan.max_concurrency,
            figures.max_concurrency,
        ),
    ]


def reconcile_to_json(rows: list[ReconcileRow], failures: tuple[LogFailure, ...] = ()) -> FromLog:
    """The comparison as plan --json's `from_log`: rounded figures and the log's failures."""
    return FromLog(
        figures=[
            LoggedFigure(
                name=r.name,
                unit=r.unit,
                planned=round(r.planned, 3),
                actual=r.actual,
                delta_pct=None if r.delta_pct is None else round(r.delta_pct, 1),
            )
            for r in rows
        ],
        failures=[LoggedFailure(kind=f.kind, line=f.line_no, text=f.text) for f in failures],
    )
