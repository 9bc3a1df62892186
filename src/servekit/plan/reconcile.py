"""Planned versus actual (core): line a memory plan up against a parsed vLLM startup log."""

from __future__ import annotations

from dataclasses import dataclass

from servekit.plan.engine_rules import release_or_zero
from servekit.plan.fit import MemoryPlan
from servekit.plan.startup_log import LogFailure, StartupFigures
from servekit.results.plan import FromLog, KvExplained, KvTermShare, LoggedFailure, LoggedFigure
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


def reconcile_to_json(
    rows: list[ReconcileRow],
    failures: tuple[LogFailure, ...] = (),
    explained: KvAttribution | None = None,
    mismatches: tuple[str, ...] = (),
) -> FromLog:
    """The comparison as plan --json's `from_log`: rounded figures, the log's failures, the
    terms that explain the KV difference and what the log ran with unlike the plan."""
    return FromLog(
        mismatches=list(mismatches),
        explained=None if explained is None else _explained_json(explained),
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


@dataclass(frozen=True, slots=True)
class KvAttribution:
    """Which planned terms explain the planned-minus-logged KV cache memory and tokens.

    KV = requested - weights - (activation peak + non-torch) - (graph estimate when it is
    in the budget), so the KV gap is exactly minus the sum of the other terms' gaps: each
    term's share is minus its own planned-minus-logged figure, and activation peak +
    non-torch (which vLLM prints no line for) is what the others leave.

    Attributes:
        kv_gap_gib: planned minus logged available KV cache memory.
        terms: (term, GiB of the KV gap it explains), largest magnitude first.
        tokens_gap_pct: planned versus logged KV tokens, in percent, when both exist.
        memory_gap_pct: planned versus logged KV memory, in percent.
        bytes_per_token_planned: KV bytes per token per GPU in the plan.
        bytes_per_token_logged: logged KV memory / logged tokens (blocks and hybrid groups
            make it differ from the plain per-token size).
        requested_note: when the log requested other memory than the plan (another
            gpu_memory_utilization or device total), the sentence that says so.
    """

    kv_gap_gib: float
    terms: tuple[tuple[str, float], ...]
    tokens_gap_pct: float | None
    memory_gap_pct: float
    bytes_per_token_planned: int
    bytes_per_token_logged: float | None
    requested_note: str | None = None

    @property
    def biggest(self) -> str:
        """The term that explains most of the KV gap."""
        return self.terms[0][0]


OVERHEAD_TERM = "activation peak + non-torch"
REQUESTED_TERM = "requested (gpu_memory_utilization x total memory)"
# The log prints GiB to 2 decimals: a smaller difference in total memory is rounding.
_GIB_PRINTED = 0.006


def _logged_request(plan: MemoryPlan, figures: StartupFigures) -> tuple[float, str] | None:
    """The memory the log's engine requested (GiB) and a sentence comparing it with the
    plan's, when its utilization or device total differs from the plan's; else None."""
    i = plan.inputs
    capacity = to_gib(plan.capacity_bytes)
    utilization = figures.gpu_memory_utilization
    total = figures.total_memory_gib
    other_gmu = utilization is not None and abs(utilization - i.gpu_memory_utilization) > 1e-9
    other_total = total is not None and abs(total - capacity) > _GIB_PRINTED
    if not (other_gmu or other_total):
        return None
    gmu = i.gpu_memory_utilization if utilization is None else utilization
    logged = (capacity if total is None else total) * gmu
    planned = to_gib(plan.requested_bytes)
    note = (
        f"the log requested {gmu} x {capacity if total is None else total:.2f} GiB = "
        f"{logged:.2f} GiB, the plan {i.gpu_memory_utilization} x {capacity:.2f} GiB = "
        f"{planned:.2f} GiB: {planned - logged:+.2f} GiB of the KV gap is the request"
    )
    return logged, note


def log_mismatches(plan: MemoryPlan, figures: StartupFigures) -> tuple[str, ...]:
    """What the log ran with that differs from the plan: the vLLM version (its accounting)
    and gpu_memory_utilization, one sentence each."""
    found: list[str] = []
    version, planned = figures.vllm_version, plan.inputs.engine_version
    if version is not None and release_or_zero(version) != release_or_zero(planned):
        found.append(
            f"the log ran vLLM {version}, the plan follows {planned or 'the newest'}'s accounting"
        )
    utilization = figures.gpu_memory_utilization
    if utilization is not None and abs(utilization - plan.inputs.gpu_memory_utilization) > 1e-9:
        found.append(
            f"the log ran at gpu_memory_utilization {utilization}, the plan at "
            f"{plan.inputs.gpu_memory_utilization}"
        )
    return tuple(found)


def attribute_kv(plan: MemoryPlan, figures: StartupFigures) -> KvAttribution | None:
    """Attribute the KV gap to the terms whose planned-vs-logged gaps account for it; None
    when the log has no available-KV line or the plan's KV size is set outright."""
    logged_kv = figures.available_kv_gib
    if logged_kv is None or plan.inputs.kv_cache_memory_bytes is not None:
        return None
    gap = to_gib(plan.kv_cache_bytes) - logged_kv
    terms: list[tuple[str, float]] = []
    request = _logged_request(plan, figures)
    if request is not None:
        terms.append((REQUESTED_TERM, to_gib(plan.requested_bytes) - request[0]))
    if figures.weights_gib is not None:
        terms.append(("weights", figures.weights_gib - to_gib(plan.weights.total_bytes)))
    logged_graphs = figures.estimated_cuda_graph_gib
    if plan.inputs.estimate_cudagraphs and logged_graphs is not None:
        terms.append(("CUDA graphs (in budget)", logged_graphs - to_gib(plan.graphs.total_bytes)))
    terms.append((OVERHEAD_TERM, gap - sum(share for _, share in terms)))
    terms.sort(key=lambda term: -abs(term[1]))
    tokens = figures.kv_cache_tokens
    per_token = (logged_kv * (1 << 30) / tokens) if tokens else None
    return KvAttribution(
        kv_gap_gib=gap,
        terms=tuple(terms),
        tokens_gap_pct=(plan.kv_cache_tokens / tokens - 1) * 100 if tokens else None,
        memory_gap_pct=(gap / logged_kv * 100) if logged_kv else 0.0,
        bytes_per_token_planned=plan.kv_bytes_per_token,
        bytes_per_token_logged=per_token,
        requested_note=None if request is None else request[1],
    )


def attribution_lines(attribution: KvAttribution) -> list[str]:
    """The attribution as sentences for the terminal and Markdown."""
    a = attribution
    shares = ", ".join(f"{name} {share:+.2f}" for name, share in a.terms)
    lines = [] if a.requested_note is None else [a.requested_note]
    lines += [
        f"KV cache {a.kv_gap_gib:+.2f} GiB planned vs logged = {shares} GiB; "
        f"the biggest: {a.biggest}"
    ]
    if a.tokens_gap_pct is not None and a.bytes_per_token_logged:
        size_pct = (a.bytes_per_token_planned / a.bytes_per_token_logged - 1) * 100
        lines.append(
            f"KV tokens {a.tokens_gap_pct:+.1f}%: KV memory {a.memory_gap_pct:+.1f}%, bytes per "
            f"token {a.bytes_per_token_planned:,} planned vs {a.bytes_per_token_logged:,.0f} "
            f"logged memory / tokens ({size_pct:+.1f}%; blocks and hybrid KV groups)"
        )
    return lines


def _explained_json(a: KvAttribution) -> KvExplained:
    return KvExplained(
        kv_gap_gib=round(a.kv_gap_gib, 3),
        terms=[KvTermShare(term=name, gib=round(share, 3)) for name, share in a.terms],
        biggest=a.biggest,
        tokens_gap_pct=None if a.tokens_gap_pct is None else round(a.tokens_gap_pct, 2),
        bytes_per_token_logged=(
            None if a.bytes_per_token_logged is None else round(a.bytes_per_token_logged, 1)
        ),
    )
