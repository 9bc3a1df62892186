"""The per-GPU memory plan (core): vLLM's KV budget, capacity, fit and warnings.

requested = capacity x gpu_memory_utilization, where capacity is the total the CUDA
driver reports. KV cache = requested - weights - activation peak - non-torch memory,
minus the CUDA-graph estimate when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on.
With the estimate off, graphs are captured outside that budget and must fit in what
the budget leaves free plus the activation headroom released after profiling.
The formula holds for V0 and V1; the engine version's `Accounting` (plan/engine_rules.py)
decides whether the estimate can apply, how V0 quotes concurrency, and which measured
terms of that release the plan leaves out (each named in a warning).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from servekit.plan.activations import ActivationPeak, activation_peak
from servekit.plan.comm_memory import comm_memory_warnings
from servekit.plan.cuda_graphs import GraphPlan, graph_plan
from servekit.plan.engine_rules import ESTIMATE_CUDAGRAPHS_ENV
from servekit.plan.inputs import PlanInputs
from servekit.plan.kv_cache import KvLayout, KvTerm, kv_layout, kv_terms
from servekit.plan.quantization import lookup_scheme
from servekit.plan.weights import WeightBreakdown, weights_per_gpu
from servekit.results.plan import (
    PLAN_VERSION,
    ActivationBreakdown,
    CudaGraphs,
    KvCacheGroupBlock,
    KvTermBlock,
    PerGpu,
    PlanDocument,
    WeightsBreakdown,
)
from servekit.units import GIB, MIB, to_gib

# Growth of non-torch device memory during vLLM's profiling run (cuBLAS/Triton
# workspaces): vLLM's own profiling report example shows "non-torch forward increase
# memory: 0.25GiB". Communicators created inside the budget are warned about, not planned
# (plan/comm_memory.py).
NON_TORCH_INCREASE_BYTES = 0.25 * GIB
# A request context length typical of chat and agent traffic, used to judge max_num_seqs.
TYPICAL_CONTEXT_TOKENS = 8192


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """A per-GPU memory plan; figures in bytes, GiB only at the edges."""

    inputs: PlanInputs
    capacity_bytes: float
    requested_bytes: float
    weights: WeightBreakdown
    activations: ActivationPeak
    non_torch_bytes: float
    graphs: GraphPlan
    kv_terms: tuple[KvTerm, ...]
    kv_cache_bytes: float
    kv_cache_bytes_estimate_on: float
    kv_cache_bytes_estimate_off: float
    kv_cache_tokens: int
    max_concurrency: float
    fits: bool
    largest_fitting_max_model_len: int | None
    warnings: tuple[str, ...]
    kv_layout: KvLayout | None = None
    gpu_blocks: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token takes on one GPU."""
        return sum(t.bytes_per_token for t in self.kv_terms)


def make_plan(
    inputs: PlanInputs,
    *,
    non_torch_bytes: float = NON_TORCH_INCREASE_BYTES,
    graph_bytes: float | None = None,
) -> MemoryPlan:
    """Return the memory plan for one configuration, never raising on a misfit.

    `graph_bytes` is a measured CUDA-graph figure (a calibration) in place of the model's.

    A plan that does not fit has fits=False and, when some shorter context fits,
    largest_fitting_max_model_len set.
    """
    capacity, requested = _requested_bytes(inputs)
    weights = weights_per_gpu(inputs)
    acts = activation_peak(inputs)
    graphs = dataclasses.replace(graph_plan(inputs), measured_bytes=graph_bytes)
    non_kv = _budgeted_weights(inputs, weights) + acts.peak_bytes + non_torch_bytes
    kv_on, kv_off = _kv_budget(inputs, requested, non_kv, graphs.total_bytes)
    kv = kv_on if inputs.estimate_cudagraphs else kv_off
    layout = kv_layout(inputs)
    blocks = layout.num_blocks(kv)
    tokens = layout.tokens(blocks, inputs)
    fits = blocks >= layout.blocks_per_request(inputs)
    largest = None if fits else _largest_fitting_len(inputs, non_torch_bytes, graph_bytes)
    plan = MemoryPlan(
        inputs=inputs,
        capacity_bytes=capacity,
        requested_bytes=requested,
        weights=weights,
        activations=acts,
        non_torch_bytes=non_torch_bytes,
        graphs=graphs,
        kv_terms=tuple(kv_terms(inputs)),
        kv_cache_bytes=kv,
        kv_cache_bytes_estimate_on=kv_on,
        kv_cache_bytes_estimate_off=kv_off,
        kv_cache_tokens=tokens,
        max_concurrency=_concurrency(layout, blocks, tokens, inputs),
        fits=fits,
        largest_fitting_max_model_len=largest,
        warnings=(),
        kv_layout=layout,
        gpu_blocks=blocks,
    )
    return dataclasses.replace(plan, warnings=tuple(plan_warnings(plan)))


def _budgeted_weights(inputs: PlanInputs, weights: WeightBreakdown) -> float:
    """The weights vLLM takes from the budget: V0 profiles the target's worker alone."""
    if inputs.accounting.weights_include_draft:
        return weights.total_bytes
    # V0 (spec_decode_worker.determine_num_available_blocks): the scorer's memory_profiling
    # counts its own weights; the draft, loaded before profiling, is in neither term
    return weights.total_bytes - weights.draft_bytes


def _concurrency(layout: KvLayout, blocks: int, tokens: int, inputs: PlanInputs) -> float:
    """vLLM's 'Maximum concurrency': blocks over a request's blocks per KV cache group in V1,
    tokens over length in V0."""
    if inputs.accounting.concurrency_whole_blocks:
        return layout.max_concurrency(blocks, inputs)
    # V0 (executor_base.initialize_cache): num_gpu_blocks x block_size / max_model_len
    return (tokens // inputs.block_size) * inputs.block_size / inputs.max_model_len


def _kv_budget(
    inputs: PlanInputs,
    requested: float,
    non_kv_bytes: float,
    graph_bytes: float,
) -> tuple[float, float]:
    """KV bytes with the graph estimate (on, off): what the request leaves after the rest."""
    if inputs.kv_cache_memory_bytes is not None:
        return float(inputs.kv_cache_memory_bytes), float(inputs.kv_cache_memory_bytes)
    base = requested - non_kv_bytes
    return base - graph_bytes, base


def _requested_bytes(inputs: PlanInputs) -> tuple[float, float]:
    capacity = inputs.gpu.cuda_visible_mib * MIB
    return capacity, math.ceil(capacity * inputs.gpu_memory_utilization)


def _kv_fits(inputs: PlanInputs, non_torch_bytes: float, graph_bytes: float | None) -> bool:
    """Whether one request of max_model_len fits the KV blocks (vLLM's start-up check)."""
    _, requested = _requested_bytes(inputs)
    weights = _budgeted_weights(inputs, weights_per_gpu(inputs))
    non_kv = weights + activation_peak(inputs).peak_bytes + non_torch_bytes
    graphs = graph_plan(inputs).total_bytes if graph_bytes is None else graph_bytes
    on, off = _kv_budget(inputs, requested, non_kv, graphs)
    layout = kv_layout(inputs)
    blocks = layout.num_blocks(on if inputs.estimate_cudagraphs else off)
    return blocks >= layout.blocks_per_request(inputs)


def _largest_fitting_len(
    inputs: PlanInputs, non_torch_bytes: float, graph_bytes: float | None
) -> int | None:
    """Largest max_model_len (a multiple of the block size) whose plan fits, by bisection.

    The search re-plans each candidate because a shorter context also shrinks the
    multimodal profiling input.
    """

    def fits(length: int) -> bool:
        shorter = dataclasses.replace(inputs, max_model_len=length)
        return _kv_fits(shorter, non_torch_bytes, graph_bytes)

    step = inputs.block_size
    lo, hi = 0, inputs.max_model_len // step
    if not fits(step):
        return None
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid * step):
            lo = mid
        else:
            hi = mid - 1
    return lo * step


def plan_warnings(plan: MemoryPlan) -> list[str]:
    """Return the risks a user needs to see for this plan."""
    i = plan.inputs
    out: list[str] = _accounting_warnings(i)
    out += list(plan.kv_layout.warnings) if plan.kv_layout else []
    if i.gpu.unified_memory:
        out.append(
            f"{i.gpu.name} shares one memory between CPU and GPU: vLLM measures non-torch "
            "memory as the drop in free device memory, so host memory the process or the OS "
            "takes while loading and profiling (page cache, compiler heaps) counts against the "
            "KV budget; not planned: expect less KV cache (check with plan --from-log)"
        )
    risk, failure = capture_risks(plan)
    out += [w for w in (risk, failure) if w is not None]
    typical = min(i.max_model_len, TYPICAL_CONTEXT_TOKENS)
    held = plan.kv_cache_tokens // typical if typical else 0
    if plan.fits and held < i.max_num_seqs / 2:
        out.append(
            f"max_num_seqs {i.max_num_seqs} is far above what the KV cache holds at a "
            f"{typical}-token context ({held} requests); the rest wait or are preempted"
        )
    scheme = lookup_scheme(i.model.quantization)
    if scheme.runs_weight_only(gpu_has_fp8=i.gpu.fp8):
        out.append(
            f"{i.gpu.name} (sm{i.gpu.sm}) has no FP8 compute: {scheme.name} weights run "
            "weight-only through Marlin kernels (dequantized to 16-bit in the GEMM)"
        )
    if plan.activations.mm_encoder_bytes > plan.activations.text_only_bytes:
        freed = plan.activations.mm_encoder_bytes - plan.activations.text_only_bytes
        out.append(
            f"multimodal profiling with a {i.max_model_len}-token dummy input reserves "
            f"{to_gib(plan.activations.mm_encoder_bytes):.1f} GiB of activations; for text-only "
            "serving --set language_model_only=true (or --set skip_mm_profiling=true) frees "
            f"~{to_gib(freed):.1f} GiB for KV cache"
        )
    if not plan.fits:
        out.append(misfit_message(plan))
    return out


def capture_risks(plan: MemoryPlan) -> tuple[str | None, str | None]:
    """CUDA-graph capture outside the KV budget (the estimate flag off): the OOM risk when
    the graphs exceed the memory the budget leaves free, and the certain failure when they
    exceed that plus the activation memory released after profiling (None: no such risk)."""
    i = plan.inputs
    headroom = plan.capacity_bytes - plan.requested_bytes
    graphs = plan.graphs.total_bytes
    if i.estimate_cudagraphs or graphs <= headroom:
        return None, None
    # spelled as the profile overrides `plan` and `doctor` take (--set), not vLLM's flags
    room = math.floor((plan.capacity_bytes - graphs) / plan.capacity_bytes * 100) / 100
    fix = f"lower it with --set gpu_memory_utilization={f'{room:g}' if room > 0 else 'FRACTION'}"
    if i.accounting.estimate_cudagraphs_env:
        fix += f" or count the graphs in the budget with --set env.{ESTIMATE_CUDAGRAPHS_ENV}=1"
    risk = (
        f"CUDA graphs (~{to_gib(graphs):.1f} GiB) are outside the KV budget: "
        f"gpu_memory_utilization {i.gpu_memory_utilization} leaves {to_gib(headroom):.2f} GiB "
        f"free, so capture relies on the {to_gib(plan.activations.peak_bytes):.1f} GiB of "
        f"activation memory released after profiling; OOM risk during graph capture; {fix}"
    )
    failure = None
    if graphs > headroom + plan.activations.peak_bytes:
        failure = (
            f"CUDA graphs (~{to_gib(graphs):.1f} GiB) exceed the free memory plus activation "
            "headroom; graph capture will run out of memory"
        )
    return risk, failure


def _accounting_warnings(i: PlanInputs) -> list[str]:
    """What the engine version made the plan assume, and the terms of that release it omits."""
    rules = i.accounting
    out = [rules.assumption] if rules.assumption else []
    if rules.non_kv == "device_used":
        out.append(
            f"vLLM {rules.version} (V1 before 0.9.1) also takes the CUDA context and all other "
            "non-torch memory on the device from the KV budget; not planned: expect less KV cache"
        )
    if rules.distributed_init_in_budget and i.tensor_parallel_size * i.pipeline_parallel_size > 1:
        out.append(
            f"vLLM {rules.version} creates NCCL communicators and all-reduce buffers after its "
            "memory snapshot, so they count in the KV budget; not planned: expect less KV cache"
        )
    out += comm_memory_warnings(i)
    if i.draft is not None and not rules.weights_include_draft:
        out.append(
            "V0 profiles the target model's worker alone: the draft model's weights are outside "
            "vLLM's KV budget (OOM risk), and 'Model loading took' prints the target alone"
        )
    return out


def misfit_message(plan: MemoryPlan) -> str:
    """The one-line error for a plan that does not fit, naming the largest context that does."""
    message, fix = misfit_parts(plan)
    return f"{message}; {fix}"


def misfit_parts(plan: MemoryPlan) -> tuple[str, str]:
    """`misfit_message` as (what does not fit, how to make it fit)."""
    i = plan.inputs
    layout = plan.kv_layout
    need = layout.request_bytes(i) if layout else i.max_model_len * plan.kv_bytes_per_token
    have = max(plan.kv_cache_bytes, 0.0)
    # spelled as the profile overrides `plan` and `doctor` take (--set), not vLLM's flags
    best = plan.largest_fitting_max_model_len
    fix = (
        f"lower it with --set max_model_len={best}" if best else "use more GPUs or a smaller model"
    )
    raise_what = (
        "raise --set kv_cache_memory_bytes=BYTES"
        if i.kv_cache_memory_bytes is not None
        else "raise --set gpu_memory_utilization=FRACTION"
    )
    return (
        f"max_model_len {i.max_model_len} needs {to_gib(need):.1f} GiB of KV cache per GPU but "
        f"{to_gib(have):.1f} GiB is available",
        f"{fix} or {raise_what}",
    )


def plan_to_json(plan: MemoryPlan) -> PlanDocument:
    """Return the stable `plan --json` document (docs/schemas/README.md), figures per GPU in GiB."""
    w = plan.weights
    a = plan.activations
    g = plan.graphs
    i = plan.inputs

    def gib(value: float) -> float:
        return round(to_gib(value), 3)

    return PlanDocument(
        schema_version=PLAN_VERSION,
        profile=i.model.name,
        gpu=i.gpu.name,
        per_gpu=PerGpu(
            capacity_gib=gib(plan.capacity_bytes),
            requested_gib=gib(plan.requested_bytes),
            weights_gib=gib(w.total_bytes),
            activation_peak_gib=gib(a.peak_bytes),
            non_torch_gib=gib(plan.non_torch_bytes),
            cuda_graphs_gib=gib(g.total_bytes),
            kv_cache_gib=gib(plan.kv_cache_bytes),
        ),
        weights_breakdown_gib=WeightsBreakdown(
            embeddings=gib(w.embeddings_bytes),
            attention=gib(w.attention_bytes),
            dense_mlp=gib(w.dense_mlp_bytes),
            experts=gib(w.experts_bytes),
            other=gib(w.other_bytes),
            draft=gib(w.draft_bytes),
        ),
        activation_breakdown_gib=ActivationBreakdown(
            forward=gib(a.forward_bytes),
            sampler=gib(a.sampler_bytes),
            multimodal_encoder=gib(a.mm_encoder_bytes),
        ),
        cuda_graphs=CudaGraphs(
            piecewise=len(g.piecewise_sizes),
            full=len(g.full_sizes),
            largest_size=max(g.piecewise_sizes, default=0),
            estimate_in_budget=i.estimate_cudagraphs,
        ),
        kv_bytes_per_token=plan.kv_bytes_per_token,
        kv_terms=[
            KvTermBlock(label=t.label, formula=t.formula, bytes_per_token=t.bytes_per_token)
            for t in plan.kv_terms
        ],
        kv_cache_tokens=plan.kv_cache_tokens,
        max_model_len=i.max_model_len,
        max_concurrency_at_max_model_len=round(plan.max_concurrency, 2),
        kv_cache_gib_estimate_on=gib(plan.kv_cache_bytes_estimate_on),
        kv_cache_gib_estimate_off=gib(plan.kv_cache_bytes_estimate_off),
        fits=plan.fits,
        largest_fitting_max_model_len=plan.largest_fitting_max_model_len,
        warnings=list(plan.warnings),
        kv_cache_groups=[
            KvCacheGroupBlock(
                kind=g.kind,
                layers=g.layers,
                block_size=g.block_size,
                page_bytes=g.page_bytes,
                window=g.window,
            )
            for g in (plan.kv_layout.groups if plan.kv_layout else ())
        ],
        gpu_blocks=plan.gpu_blocks,
    )
