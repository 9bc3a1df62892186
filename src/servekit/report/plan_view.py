"""Terminal view of a memory plan (view: builds rich renderables, prints nothing)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from servekit.plan.checkpoint import CheckpointInfo
from servekit.plan.fit import MemoryPlan
from servekit.plan.reconcile import KvAttribution, ReconcileRow, attribution_lines
from servekit.plan.startup_log import LogFailure
from servekit.profiles.schema import Calibration
from servekit.units import to_gib


def plan_view(
    plan: MemoryPlan,
    rows: list[ReconcileRow] | None = None,
    failures: tuple[LogFailure, ...] = (),
    checkpoint: CheckpointInfo | None = None,
    explained: KvAttribution | None = None,
    measured: Calibration | None = None,
    mismatches: tuple[str, ...] = (),
) -> RenderableType:
    """Return the budget table, KV derivation, capacity, warnings and optional log comparison
    (what the log ran with unlike the plan, then the terms that explain the KV difference);
    `measured` marks the calibrated terms."""
    i = plan.inputs
    title = (
        f"{i.model.name}: {i.tensor_parallel_size * i.pipeline_parallel_size}x {i.gpu.name}, "
        f"max_model_len {i.max_model_len:,}"
    )
    budget = Table("per GPU", "GiB", "why", title=title, title_justify="left")
    graphs_note = (
        "inside the budget (estimate on)" if i.estimate_cudagraphs else "outside the budget"
    )
    for name, value, why in (
        ("capacity", plan.capacity_bytes, "total the CUDA driver reports"),
        ("requested", plan.requested_bytes, f"capacity x {i.gpu_memory_utilization}"),
        ("weights", plan.weights.total_bytes, "TP-sharded, draft model included"),
        *_overhead_rows(plan, measured),
        ("CUDA graphs", plan.graphs.total_bytes, _graphs_why(plan, measured, graphs_note)),
        ("KV cache", plan.kv_cache_bytes, "what remains for the cache"),
    ):
        budget.add_row(name, f"{to_gib(value):.2f}", why)

    kv = Table(
        "KV term",
        "bytes/token",
        "derivation",
        title="KV cache per token per GPU",
        title_justify="left",
    )
    for term in plan.kv_terms:
        kv.add_row(term.label, f"{term.bytes_per_token:,}", term.formula)
    kv.add_row("total", f"{plan.kv_bytes_per_token:,}", "")

    lines = [
        Text(
            f"KV cache: {plan.kv_cache_tokens:,} tokens; max concurrency at "
            f"{i.max_model_len:,} tokens: {plan.max_concurrency:.2f}x; "
            f"KV with the graph estimate on: {to_gib(plan.kv_cache_bytes_estimate_on):.2f} GiB, "
            f"off: {to_gib(plan.kv_cache_bytes_estimate_off):.2f} GiB"
        ),
        Text("fits" if plan.fits else "DOES NOT FIT", style="green" if plan.fits else "bold red"),
    ]
    layout = plan.kv_layout
    if layout is not None and len(layout.groups) > 1:
        kinds: dict[str, int] = {}
        for group in layout.groups:
            name = group.kind if group.window is None else f"{group.kind} {group.window}"
            kinds[name] = kinds.get(name, 0) + 1
        shown = ", ".join(f"{n} x {kind}" for kind, n in kinds.items())
        lines.insert(
            1,
            Text(
                f"KV cache groups (hybrid attention): {shown}, {layout.groups[0].layers} layers "
                f"each; {plan.gpu_blocks:,} blocks of {layout.bytes_per_block:,} B; tokens = "
                f"blocks / {len(layout.groups)} groups x block size"
            ),
        )
    if checkpoint is not None:
        groups = ", ".join(
            f"{name} {to_gib(size):.2f}" for name, size in checkpoint.group_bytes.items()
        )
        lines.append(
            Text(
                f"checkpoint {checkpoint.model_dir}: {to_gib(checkpoint.total_bytes):.2f} GiB in "
                f"{checkpoint.shard_count} shard(s) ({groups} GiB); /{i.tensor_parallel_size} = "
                f"{to_gib(checkpoint.total_bytes) / i.tensor_parallel_size:.2f} GiB per GPU "
                "before replication"
            )
        )
    parts: list[RenderableType] = [budget, kv, *lines]
    parts += [Text(f"warning: {w}", style="yellow") for w in plan.warnings]
    if rows is not None:
        parts.append(_reconcile_table(rows))
    parts += [Text(f"warning: {m}", style="yellow") for m in mismatches]
    if explained is not None:
        parts += [Text(line) for line in attribution_lines(explained)]
    parts += [Text(f"log line {f.line_no}: {f.kind}: {f.text}", style="bold red") for f in failures]
    return Group(*parts)


def _graphs_why(plan: MemoryPlan, measured: Calibration | None, note: str) -> str:
    if plan.graphs.measured_bytes is not None and measured is not None:
        return f"{_measured_why(measured)}, {note}"
    return f"{plan.graphs.num_graphs} graphs, {note}"


def _overhead_rows(plan: MemoryPlan, measured: Calibration | None) -> list[tuple[str, float, str]]:
    """The activation peak and non-torch rows, or the one measured figure replacing them."""
    if measured is not None:
        total = plan.activations.peak_bytes + plan.non_torch_bytes
        return [("activation + non-torch", total, _measured_why(measured))]
    return [
        ("activation peak", plan.activations.peak_bytes, "largest profiled live set"),
        ("non-torch", plan.non_torch_bytes, "workspaces grown during profiling"),
    ]


def _measured_why(measured: Calibration) -> str:
    source = measured.source
    return source if source.startswith("measured") else f"measured: {source}"


def _reconcile_table(rows: list[ReconcileRow]) -> Table:
    table = Table(
        "figure", "planned", "logged", "delta", title="planned vs startup log", title_justify="left"
    )
    for row in rows:
        actual = "-" if row.actual is None else f"{row.actual:,.2f}"
        delta = "-" if row.delta_pct is None else f"{row.delta_pct:+.1f}%"
        table.add_row(f"{row.name} ({row.unit})", f"{row.planned:,.2f}", actual, delta)
    return table
