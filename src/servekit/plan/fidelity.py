"""Planner fidelity against real vLLM startups (core): corpus, launch settings, comparison.

A corpus is two JSON-lines texts in the format of `benchmarks/corpus/real-startups/`:
`startups.jsonl` (one real server start: launch settings, the figures its log printed)
and `configs.jsonl` (the models' `config.json` facts). This module joins each startup to
its config, turns its launch settings into `servekit profiles new` arguments in vLLM's
spelling (read by `plan.fidelity_settings`), decides per figure whether the entry says
enough to predict it (and why not), and compares a `plan --json` document with what the
log printed. Running the CLI is the shell's job (`servekit.cli._fidelity`); nothing here
is keyed to any entry's id.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servekit.plan.fidelity_corpus import (
    ConfigRecord,
    Corpus,
    JoinedConfig,
    RelatedConfig,
    StartupRecord,
    join_config,
    parse_corpus,
)
from servekit.plan.fidelity_settings import (
    DRAFTLESS_METHODS,
    engine_version,
    quantization_kind,
    resolve_gpu,
    serve_sets,
    speculative_method,
)
from servekit.units import GIB

__all__ = [
    "FIGURES",
    "ConfigRecord",
    "Corpus",
    "EntryResult",
    "Figure",
    "FigureResult",
    "FigureStats",
    "JoinedConfig",
    "LaunchPlan",
    "RelatedConfig",
    "StartupRecord",
    "Status",
    "Unplanned",
    "compare_entry",
    "distribution",
    "join_config",
    "launch_plan",
    "parse_corpus",
    "predicted_figures",
    "within_bound",
]

Figure = Literal["weights", "available_kv", "kv_tokens", "max_concurrency"]
FIGURES: tuple[Figure, ...] = ("weights", "available_kv", "kv_tokens", "max_concurrency")
# The corpus's `figures` keys, per figure.
LOGGED_KEYS: Mapping[Figure, str] = {
    "weights": "model_loading_gib",
    "available_kv": "available_kv_cache_gib",
    "kv_tokens": "kv_cache_tokens",
    "max_concurrency": "max_concurrency",
}
# The Must-show bounds of issue #15: relative bounds, and the KV memory's absolute floor.
WEIGHTS_BOUND = 0.02
AVAILABLE_KV_BOUND = 0.05
AVAILABLE_KV_FLOOR_GIB = 1.0
KV_TOKENS_BOUND = 0.05


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """What the shell runs for one entry, and which figures it may compare.

    Attributes:
        entry: the startup.
        config: the config.json the profile is made from.
        gpu: the catalog GPU name; count: `--gpus`.
        engine_version: `--engine-version`, or None when the entry does not say.
        sets: `--set key=value` arguments in vLLM's spelling.
        capacity_bytes: the logged KV memory, for a second plan with
            `kv_cache_memory_bytes` set to it (None: the log printed no usable budget).
            It checks the token capacity apart from the budget, and stands in for the
            plan's own budget where the entry does not say enough to predict it
            (`tokens_at_logged_kv`).
        incomplete: per figure the entry cannot predict, why.
        notes: what was inferred or defaulted.
    """

    entry: StartupRecord
    config: Mapping[str, Any]
    gpu: str
    count: int
    engine_version: str | None
    sets: tuple[str, ...]
    capacity_bytes: int | None
    incomplete: Mapping[Figure, str]
    notes: tuple[str, ...]
    tokens_at_logged_kv: bool = False


@dataclass(frozen=True, slots=True)
class Unplanned:
    """Why an entry cannot be planned at all.

    Attributes:
        reason: one line.
        status: 'incomplete' when the corpus lacks the facts (no config, no GPU named),
            'failed' when servekit lacks them (a GPU its catalog does not know).
    """

    reason: str
    status: Literal["incomplete", "failed"]


def launch_plan(entry: StartupRecord, configs: Sequence[ConfigRecord]) -> LaunchPlan | Unplanned:
    """Return how to plan `entry`, or why it cannot be planned at all."""
    joined = join_config(entry, configs)
    if isinstance(joined, str):
        return Unplanned(joined, "incomplete")
    if not entry.gpu:
        return Unplanned("GPU: the entry does not name its GPU", "incomplete")
    gpu = resolve_gpu(entry.gpu, entry.gpu_mem_gib_reported)
    if isinstance(gpu, str):
        return Unplanned(gpu, "failed")
    notes = [n for n in (joined.note, gpu.note) if n]
    sets, set_notes = serve_sets(entry, joined.config, stand_in=joined.related_model is not None)
    notes += set_notes
    tp, pp, dp = entry.tp or 1, entry.pp or 1, entry.dp or 1
    count = tp * pp * dp
    if gpu.count is not None and gpu.count != count:
        notes.append(f"{gpu.count} GPUs named, tp x pp x dp = {count} planned")
    version = engine_version(entry.vllm_version)
    if version is None:
        notes.append("vLLM version not in the entry: the planner's default accounting")
    blocked = _blocked_figures(entry, joined)
    logged_kv = entry.figures.get(LOGGED_KEYS["available_kv"]) or 0.0
    printed = entry.figures.get(LOGGED_KEYS["kv_tokens"]) is not None
    capacity = round(logged_kv * GIB) if printed and logged_kv > 0 else None
    stand_in = "available_kv" in blocked and "kv_tokens" not in blocked and capacity is not None
    if "available_kv" in blocked and not stand_in:
        blocked.setdefault("kv_tokens", blocked["available_kv"])
        blocked.setdefault("max_concurrency", blocked["available_kv"])
    at = entry.figures.get("max_concurrency_at_tokens")
    model_len = entry.max_model_len or (int(at) if at else None)
    if model_len is None:
        blocked.setdefault("max_concurrency", "max_model_len: unknown")
    elif at is not None and int(at) != model_len:
        blocked.setdefault(
            "max_concurrency", f"the log's concurrency is for {int(at)} tokens, not {model_len}"
        )
    return LaunchPlan(
        entry=entry,
        config=joined.config,
        gpu=gpu.name,
        count=count,
        engine_version=version,
        sets=tuple(sets),
        capacity_bytes=capacity,
        incomplete=blocked,
        notes=tuple(notes),
        tokens_at_logged_kv=stand_in,
    )


def _blocked_figures(entry: StartupRecord, joined: JoinedConfig) -> dict[Figure, str]:
    """Per figure, why the entry cannot predict it (weights first: the rest depend on it)."""
    blocked: dict[Figure, str] = {}
    if quantization_kind(entry, joined.config, stand_in=joined.related_model is not None) == (
        "unknown"
    ):
        blocked["weights"] = (
            f"quantization: {entry.quantization!r} but the config has no quantization_config"
        )
    method = speculative_method(entry)
    if method is not None and method not in DRAFTLESS_METHODS:
        reason = f"speculative decoding ({method}): the draft's weights and KV layers are unknown"
        blocked.setdefault("weights", reason)
        blocked["kv_tokens"] = reason
        blocked["max_concurrency"] = reason
    if "weights" in blocked:
        blocked["available_kv"] = blocked["weights"]
    elif entry.gpu_memory_utilization is None:
        blocked["available_kv"] = "gpu_memory_utilization: unknown"
    return blocked


Status = Literal["within", "outside", "planned", "failed", "incomplete", "not printed"]


@dataclass(frozen=True, slots=True)
class FigureResult:
    """One figure of one entry: predicted against logged.

    Attributes:
        status: within/outside the bound, planned (a figure without a bound), failed
            (the planner gave no figure),
            incomplete (the entry does not say enough), or not printed by the log.
        basis: 'plan' (the entry's own budget) or 'logged KV memory' (token figures
            planned with kv_cache_memory_bytes at the KV memory the log printed).
        error: (predicted - logged) / |logged|.
    """

    figure: Figure
    status: Status
    logged: float | None = None
    predicted: float | None = None
    error: float | None = None
    reason: str = ""
    basis: str = "plan"


@dataclass(frozen=True, slots=True)
class EntryResult:
    """Every figure of one corpus entry, and the token capacity at the logged KV memory."""

    entry_id: str
    figures: tuple[FigureResult, ...]
    notes: tuple[str, ...] = ()
    problem: str | None = None
    # KV tokens planned at the KV memory the log printed: the token capacity's own error,
    # apart from the budget's (None where the entry gives no budget or no token figure).
    tokens_at_logged_kv: FigureResult | None = None

    def figure(self, name: Figure) -> FigureResult:
        """The result for one figure."""
        return next(f for f in self.figures if f.figure == name)


def within_bound(figure: Figure, predicted: float, logged: float) -> bool | None:
    """Whether `predicted` meets issue #15's bound for `figure` (None: the figure has none)."""
    diff = abs(predicted - logged)
    if figure == "weights":
        return diff <= WEIGHTS_BOUND * abs(logged)
    if figure == "available_kv":
        return diff <= max(AVAILABLE_KV_BOUND * abs(logged), AVAILABLE_KV_FLOOR_GIB)
    if figure == "kv_tokens":
        return diff <= KV_TOKENS_BOUND * abs(logged)
    return None


def predicted_figures(document: Mapping[str, Any]) -> dict[Figure, float]:
    """The four figures of a `plan --json` document (weights and KV in GiB)."""
    per_gpu = document.get("per_gpu", {})
    return {
        "weights": float(per_gpu["weights_gib"]),
        "available_kv": float(per_gpu["kv_cache_gib"]),
        "kv_tokens": float(document["kv_cache_tokens"]),
        "max_concurrency": float(document["max_concurrency_at_max_model_len"]),
    }


def compare_entry(
    entry: StartupRecord,
    launch: LaunchPlan | Unplanned,
    plan: Mapping[str, Any] | str | None,
    capacity_plan: Mapping[str, Any] | str | None = None,
) -> EntryResult:
    """Compare one entry's logged figures with its plan documents (or the CLI's error).

    Args:
        entry: the startup.
        launch: `launch_plan`'s answer.
        plan: the `plan --json` document, or the error line the CLI printed.
        capacity_plan: the plan at the logged KV memory, when `launch.capacity_bytes`.
    """
    if isinstance(launch, Unplanned):
        figures = tuple(_figure(entry, f, launch.status, launch.reason) for f in FIGURES)
        return EntryResult(entry.id, figures, problem=launch.reason)
    results: list[FigureResult] = []
    for name in FIGURES:
        use_capacity = launch.tokens_at_logged_kv and name in ("kv_tokens", "max_concurrency")
        document = capacity_plan if use_capacity else plan
        basis = "logged KV memory" if use_capacity else "plan"
        results.append(_compare_figure(entry, launch, name, document, basis))
    at_logged = None
    if launch.capacity_bytes is not None and "kv_tokens" not in launch.incomplete:
        at_logged = _compare_figure(entry, launch, "kv_tokens", capacity_plan, "logged KV memory")
    problem = plan if isinstance(plan, str) else None
    return EntryResult(
        entry.id, tuple(results), notes=launch.notes, problem=problem, tokens_at_logged_kv=at_logged
    )


def _compare_figure(
    entry: StartupRecord,
    launch: LaunchPlan,
    name: Figure,
    document: Mapping[str, Any] | str | None,
    basis: str,
) -> FigureResult:
    logged = entry.figures.get(LOGGED_KEYS[name])
    if logged is None:
        return FigureResult(name, "not printed", basis=basis)
    if name in launch.incomplete:
        return _figure(entry, name, "incomplete", launch.incomplete[name])
    if document is None or isinstance(document, str):
        return FigureResult(name, "failed", logged, reason=document or "no plan", basis=basis)
    predicted = predicted_figures(document)[name]
    error = (predicted - logged) / abs(logged) if logged else None
    inside = within_bound(name, predicted, logged)
    status: Status = "planned" if inside is None else "within" if inside else "outside"
    return FigureResult(name, status, logged, predicted, error, basis=basis)


def _figure(entry: StartupRecord, name: Figure, status: Status, reason: str) -> FigureResult:
    logged = entry.figures.get(LOGGED_KEYS[name])
    if logged is None:
        return FigureResult(name, "not printed")
    return FigureResult(name, status, logged, reason=reason)


@dataclass(frozen=True, slots=True)
class FigureStats:
    """The distribution of one figure over a corpus.

    Attributes:
        figure: which figure.
        compared: entries that print it and say enough to predict it (failures included).
        within: of those, how many meet the bound (None: no bound for this figure).
        failed: of those, how many the planner could not plan.
        incomplete: entries that print it but do not say enough.
        median_abs_error / max_abs_error: over the planned ones, |relative error|.
    """

    figure: Figure
    compared: int
    within: int | None
    failed: int
    incomplete: int
    median_abs_error: float | None
    max_abs_error: float | None = None
    misses: tuple[str, ...] = field(default=())

    @property
    def share_within(self) -> float | None:
        """within / compared (None with no bound or nothing compared)."""
        if self.within is None or not self.compared:
            return None
        return self.within / self.compared


def distribution(results: Sequence[EntryResult]) -> tuple[FigureStats, ...]:
    """Per figure: how many entries are within the bound, the median and max |error|."""
    out: list[FigureStats] = []
    for name in FIGURES:
        rows = [(r.entry_id, r.figure(name)) for r in results]
        counted = [(i, f) for i, f in rows if f.status not in ("incomplete", "not printed")]
        errors = [abs(f.error) for _, f in counted if f.error is not None]
        has_bound = name != "max_concurrency"
        out.append(
            FigureStats(
                figure=name,
                compared=len(counted),
                within=sum(f.status == "within" for _, f in counted) if has_bound else None,
                failed=sum(f.status == "failed" for _, f in counted),
                incomplete=sum(f.status == "incomplete" for _, f in rows),
                median_abs_error=statistics.median(errors) if errors else None,
                max_abs_error=max(errors) if errors else None,
                misses=tuple(i for i, f in counted if f.status in ("outside", "failed")),
            )
        )
    return tuple(out)
