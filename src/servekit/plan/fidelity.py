"""Planner fidelity against real vLLM startups (core): corpus, launch settings, comparison.

A corpus is two JSON-lines texts in the format of `benchmarks/corpus/real-startups/`:
`startups.jsonl` (one real server start: launch settings, the figures its log printed)
and `configs.jsonl` (the models' `config.json` facts). This module joins each startup to
its config, turns its launch settings into `servekit profiles new` arguments in vLLM's
spelling, decides per figure whether the entry says enough to predict it (and why not),
and compares a `plan --json` document with what the log printed. Running the CLI is the
shell's job (`servekit.cli._fidelity`); nothing here is keyed to any entry's id.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servekit.errors import ConfigError
from servekit.hardware import lookup_gpu
from servekit.plan.fidelity_corpus import (
    ConfigRecord,
    Corpus,
    JoinedConfig,
    RelatedConfig,
    StartupRecord,
    join_config,
    parse_corpus,
)
from servekit.units import GIB, MIB

__all__ = [
    "FIGURES",
    "ConfigRecord",
    "Corpus",
    "EntryResult",
    "Figure",
    "FigureResult",
    "FigureStats",
    "GpuChoice",
    "JoinedConfig",
    "LaunchPlan",
    "QuantizationKind",
    "RelatedConfig",
    "StartupRecord",
    "Status",
    "Unplanned",
    "compare_entry",
    "decode_context_parallel",
    "distribution",
    "engine_version",
    "join_config",
    "launch_plan",
    "parse_corpus",
    "predicted_figures",
    "quantization_kind",
    "resolve_gpu",
    "serve_sets",
    "speculative_method",
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
# Launch-config words that mean "no quantization" (the checkpoint's 16-bit dtype).
UNQUANTIZED = frozenset({"bf16", "bfloat16", "fp16", "float16", "half", "auto", "none"})
# Speculative methods that load no draft weights and add no KV layers.
DRAFTLESS_METHODS = frozenset({"ngram", "suffix"})
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_GPU_COUNT = re.compile(r"\s+x\s*(\d+)\b", re.IGNORECASE)
_GPU_SIZE = re.compile(r"\b(\d+)\s*GB\b", re.IGNORECASE)
_DEVICE_NAME = re.compile(r"device_name=([A-Za-z0-9_]+)")
_DCP_LOGGED = re.compile(r"(?:dcp_world_size|decode_context_parallel_size=)\s*(\d+)")
_METHOD = re.compile(r"['\"]method['\"]\s*:\s*['\"](\w+)")


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """The catalog GPU a corpus GPU string names, and how many the entry used."""

    name: str
    count: int | None
    note: str | None = None


def resolve_gpu(text: str | None, reported_gib: float | None = None) -> GpuChoice | str:
    """Map a corpus GPU string (e.g. 'NVIDIA H100 80GB (from the run name)') to the catalog.

    The text before any parenthesis is the GPU; ' xN' gives a count. Candidates are
    tried through the catalog's own alias lookup: the text as written, without the vendor
    words, with a memory size the entry states, and a device_name the log printed.
    """
    if not text:
        return "GPU: the entry does not name its GPU"
    head, _, rest = text.partition("(")
    count_match = _GPU_COUNT.search(head)
    count = int(count_match.group(1)) if count_match else None
    head = _GPU_COUNT.sub("", head).strip()
    names = [head]
    if not _GPU_SIZE.search(head):
        names += [f"{head} {size}GB" for size in dict.fromkeys(_GPU_SIZE.findall(rest))]
    names += [name.replace("_", " ") for name in _DEVICE_NAME.findall(rest)]
    for name in names:
        for candidate in _spellings(name):
            try:
                gpu = lookup_gpu(candidate)
            except ConfigError:
                continue
            notes = []
            if name != head:
                notes.append(f"GPU {head!r} read as {candidate!r} from the entry's text")
            if "inferred" in rest:
                notes.append("the corpus infers the GPU from context")
            if reported_gib is not None:
                catalog_gib = gpu.cuda_visible_mib * MIB / GIB
                if abs(catalog_gib - reported_gib) > 0.005 * reported_gib:
                    notes.append(
                        f"the log reports {reported_gib:.2f} GiB in total; the catalog's "
                        f"{gpu.name} has {catalog_gib:.2f} GiB"
                    )
            return GpuChoice(gpu.name, count, "; ".join(notes) or None)
    return (
        f"GPU: {head!r} is not in the GPU catalog (servekit/hardware/gpus.yaml) "
        "under any spelling the entry gives"
    )


def _spellings(name: str) -> list[str]:
    short = re.sub(r"^(NVIDIA\s+)?(GeForce\s+)?", "", name).strip()
    out = [name, short, short.replace(" ", "-")]
    return [s for s in dict.fromkeys(out) if s]


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
    sets, set_notes = serve_sets(entry, joined.config)
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


def engine_version(text: str | None) -> str | None:
    """'0.13.0+faa43dbf.nv26.01 (NGC 26.01)' -> '0.13.0'; None when no version is given."""
    match = _VERSION.search(text or "")
    if match is None:
        return None
    major, minor, patch = match.groups()
    return f"{major}.{minor}.{patch or 0}"


def serve_sets(entry: StartupRecord, config: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The entry's launch settings as `--set` arguments (vLLM spelling), and notes."""
    sets: list[str] = []
    notes: list[str] = []

    def put(key: str, value: object) -> None:
        if value is not None:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            sets.append(f"{key}={text}")

    put("tensor_parallel_size", entry.tp)
    put("pipeline_parallel_size", entry.pp)
    if entry.dp and entry.dp > 1:
        put("data_parallel_size", entry.dp)
    if entry.ep:
        put("enable_expert_parallel", True)
    put("gpu_memory_utilization", entry.gpu_memory_utilization)
    at = entry.figures.get("max_concurrency_at_tokens")
    if entry.max_model_len is None and at:
        notes.append(f"max_model_len {int(at)} from the log's concurrency line")
    put("max_model_len", entry.max_model_len or (int(at) if at else None))
    put("max_num_seqs", entry.max_num_seqs)
    put("max_num_batched_tokens", entry.max_num_batched_tokens)
    put("block_size", entry.block_size)
    put("kv_cache_dtype", entry.kv_cache_dtype)
    put("enforce_eager", entry.enforce_eager)
    if quantization_kind(entry, config) == "online-fp8":
        put("quantization", "fp8")
        notes.append("online fp8 quantization of a 16-bit checkpoint")
    dcp = decode_context_parallel(entry)
    if dcp is not None and dcp > 1:
        put("decode_context_parallel_size", dcp)
    for name, value in sorted(entry.env.items()):
        if _ENV_NAME.fullmatch(name) and str(value).strip():
            sets.append(f"env.{name}={str(value).split()[0]}")
    unknown = [
        k
        for k in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size")
        if not any(s.startswith(f"{k}=") for s in sets)
    ]
    if unknown:
        notes.append(f"not in the entry, planner defaults: {', '.join(unknown)}")
    return sets, notes


def decode_context_parallel(entry: StartupRecord) -> int | None:
    """The DCP size: the entry's field, else what the log printed (dcp_world_size N)."""
    if entry.dcp is not None:
        return entry.dcp
    for line in entry.log_lines:
        match = _DCP_LOGGED.search(line)
        if match:
            return int(match.group(1))
    return None


QuantizationKind = Literal["checkpoint", "unquantized", "online-fp8", "unknown"]


def quantization_kind(entry: StartupRecord, config: Mapping[str, Any]) -> QuantizationKind:
    """How the weights are stored: the config's own scheme, 16-bit, online fp8, or unknown.

    'unknown' is a quantized launch whose config carries no `quantization_config` (a
    stand-in base config, or a config copy without it): its weight bytes would be a guess.
    """
    if _has_quantization_config(config):
        return "checkpoint"
    words = re.findall(r"[a-z0-9_\-]+", (entry.quantization or "bf16").lower())
    first = words[0] if words else "bf16"
    if first in UNQUANTIZED:
        return "unquantized"
    if first == "fp8":
        return "online-fp8"
    return "unknown"


def _has_quantization_config(config: Mapping[str, Any]) -> bool:
    text = config.get("text_config")
    inner = text.get("quantization_config") if isinstance(text, Mapping) else None
    return bool(config.get("quantization_config") or inner)


def speculative_method(entry: StartupRecord) -> str | None:
    """The speculative method ('eagle', 'mtp', ...) an entry used, or None."""
    spec = entry.speculative
    if spec is None:
        return None
    if isinstance(spec, dict):
        return str(spec.get("method", "unknown")).lower()
    match = _METHOD.search(spec)
    word = match.group(1) if match else (spec.split() or ["unknown"])[0]
    return word.lower()


def _blocked_figures(entry: StartupRecord, joined: JoinedConfig) -> dict[Figure, str]:
    """Per figure, why the entry cannot predict it (weights first: the rest depend on it)."""
    blocked: dict[Figure, str] = {}
    if quantization_kind(entry, joined.config) == "unknown":
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
