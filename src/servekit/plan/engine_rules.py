"""vLLM's memory accounting by release (core): the rules a plan follows for one engine version.

How vLLM budgets KV-cache memory and what its startup log prints changed across releases:
V0 and V1 engines, how non-KV memory is measured, whether the CUDA-graph estimate is taken
from the budget, which top-k/top-p kernel the profiled sampler runs. `accounting_for` maps a
version string and the engine's environment to one frozen `Accounting`. Every rule below
names the release range it holds for and where in vLLM's source it was read (each wheel's
own file at that release); docs/memory-model.md carries the same table.

The formula itself is the same in every release checked (0.8.5 to 0.32.0):
`kv = ceil(total x gpu_memory_utilization) - (weights + activation peak + non-torch)`, minus
the CUDA-graph estimate when it is applied. What differs is what each term measures.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ESTIMATE_CUDAGRAPHS_ENV",
    "NEWEST",
    "NEWEST_KNOWN",
    "OLDEST_KNOWN",
    "USE_V1_ENV",
    "Accounting",
    "accounting_for",
    "parse_release",
    "release_or_zero",
]

ESTIMATE_CUDAGRAPHS_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
USE_V1_ENV = "VLLM_USE_V1"

Release = tuple[int, int, int]
Engine = Literal["v0", "v1"]
# How vLLM measures the memory that is not KV cache:
# - device_used: everything on the device not held by torch after profiling (CUDA context,
#   NCCL, other processes included), plus torch's peak (weights included);
# - increase_since_init: weights + torch peak increase during profiling + growth of
#   non-torch memory since the worker's initial snapshot (`memory_profiling`);
# - free_delta: free memory at the initial snapshot minus free memory after profiling,
#   plus the transient peak (torch peak minus what stays allocated).
NonKvMeasure = Literal["device_used", "increase_since_init", "free_delta"]
# The top-k/top-p implementation the profiling run's dummy sampler exercises (top_k =
# vocab - 1, top_p = 0.9 in every V1 release; top_p = 0.99 in V0):
# - sort: PyTorch sort (float32 sorted logits, int64 indices, softmax, cumulative sum);
# - triton: vLLM's Triton kernel for batches of 8 rows or more, PyTorch sort below;
# - flashinfer: FlashInfer's sorting-free sampler when it is installed and supported,
#   otherwise sort (earlier) or triton (later);
# - flashinfer_probs: the same from float32 probabilities vLLM computes first (0.8.x).
SamplerKernel = Literal["sort", "triton", "flashinfer", "flashinfer_probs"]

NEWEST_KNOWN: Release = (0, 32, 0)
"""The newest release whose source these rules were checked against."""
OLDEST_KNOWN: Release = (0, 8, 5)
"""The oldest release checked; older versions get its rules, stated as an assumption."""

_RELEASE_RE = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


@dataclass(frozen=True, slots=True)
class Accounting:
    """How one vLLM release budgets memory and what its log prints.

    Attributes:
        release: the (major, minor, patch) the rules were chosen for.
        engine: "v1", or "v0" for the legacy engine (VLLM_USE_V1=0 up to 0.10.x).
        non_kv: how the non-KV memory is measured (see `NonKvMeasure`).
        distributed_init_in_budget: NCCL communicators and custom all-reduce buffers are
            created after the worker's initial memory snapshot, so their memory counts as
            non-torch growth inside the budget (with tensor or pipeline parallelism).
        estimate_cudagraphs_env: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS exists.
        estimate_cudagraphs_default: its default when unset.
        prints_graph_estimate: the log prints "Estimated CUDA graph memory" (V1 profiles the
            graphs whenever they will be captured, whether or not the estimate is applied).
        sampler_in_profile: the sampler's dummy run is inside the profiled peak.
        sampler_kernel: the top-k/top-p implementation the dummy sampler runs.
        moe_workspace_persists: unquantized fused-MoE layers take their intermediate caches
            from vLLM's persistent workspace, so they stay allocated through the sampler.
        profile_compiled: the profiling forward pass runs the torch.compile'd model (V1,
            piecewise graphs run without CUDA graphs) rather than eager PyTorch (V0); V1 with
            enforce_eager runs eager too (see `profiles_compiled`).
        weights_include_draft: "Model loading took" covers the speculative draft model too.
        concurrency_whole_blocks: "Maximum concurrency" is blocks over blocks per request
            (V1); V0 prints blocks x block_size / max_model_len.
        kv_budget_line: the wording of the log line that reports the KV budget.
        mxfp4_triton: vLLM ships OpenAI's triton_kernels (vllm/third_party/triton_kernels),
            so MXFP4 MoE layers on sm90 to sm10x without FlashInfer run its Triton
            matmul_ogs kernel rather than Marlin (see plan/quantization.py mxfp4_moe_backend).
        lazy_tp_communicator: PyTorch's NCCL communicator of the tensor-parallel group is
            created at the profiling run's first all-gather (the logits), after the memory
            snapshot, so its buffers are non-torch growth inside the budget (plan/comm_memory.py).
        assumption: what was assumed to choose these rules (missing, unparsable, older or
            newer version than checked, an env setting the release ignores); None if nothing.
        sources: the vLLM source each applied rule was read from.
    """

    release: Release
    engine: Engine
    non_kv: NonKvMeasure
    distributed_init_in_budget: bool
    estimate_cudagraphs_env: bool
    estimate_cudagraphs_default: bool
    prints_graph_estimate: bool
    sampler_in_profile: bool
    sampler_kernel: SamplerKernel
    profile_compiled: bool
    weights_include_draft: bool
    concurrency_whole_blocks: bool
    kv_budget_line: str
    moe_workspace_persists: bool = False
    assumption: str | None = None
    sources: tuple[str, ...] = ()
    mxfp4_triton: bool = False
    lazy_tp_communicator: bool = False

    @property
    def version(self) -> str:
        """The release as text, e.g. '0.19.0'."""
        return ".".join(str(part) for part in self.release)

    def profiles_compiled(self, *, enforce_eager: bool) -> bool:
        """True when the profiled forward pass runs through torch.compile.

        V1's enforce_eager sets compilation mode NONE (config/vllm.py at v0.19.0; v0.9.1 sets
        the PIECEWISE level only without it).
        """
        return self.profile_compiled and not enforce_eager

    def estimate_cudagraphs(self, env: Mapping[str, str]) -> bool:
        """True when this release takes the CUDA-graph estimate from the KV budget under env."""
        if not self.estimate_cudagraphs_env:
            return False
        flag = env.get(ESTIMATE_CUDAGRAPHS_ENV)
        if flag is None:
            return self.estimate_cudagraphs_default
        return _truthy(flag)


@dataclass(frozen=True, slots=True)
class _Rule:
    """Fields that change from `since` on, and where in vLLM that was read."""

    since: Release
    changes: Mapping[str, object]
    source: str


_V1_BASE = Accounting(
    release=(0, 8, 0),
    engine="v1",
    non_kv="device_used",
    distributed_init_in_budget=True,
    estimate_cudagraphs_env=False,
    estimate_cudagraphs_default=False,
    prints_graph_estimate=False,
    sampler_in_profile=True,
    sampler_kernel="flashinfer_probs",
    profile_compiled=True,
    weights_include_draft=True,
    concurrency_whole_blocks=True,
    kv_budget_line="Available KV cache memory: X GiB",
    sources=(
        "v0.8.5 v1/worker/gpu_worker.py determine_available_memory: total x util - torch "
        "peak (weights included) - non-torch memory on the device",
        "v0.8.5 v1/worker/gpu_model_runner.py profile_run: _dummy_run(max_num_tokens) then "
        "_dummy_sampler_run on min(max_num_tokens, max_num_seqs) rows, top_k=vocab-1, top_p=0.9",
        "v0.8.5 v1/worker/gpu_model_runner.py load_model: DeviceMemoryProfiler around the "
        "model, LoRA and drafter (torch allocated bytes, buffers included)",
        "v0.8.5 v1/sample/ops/topk_topp_sampler.py: FlashInfer sampler unless "
        "VLLM_USE_FLASHINFER_SAMPLER=0, when installed",
    ),
)

# Cumulative: each rule's changes hold from its release on, until a later rule changes them.
_V1_RULES: tuple[_Rule, ...] = (
    _Rule(
        (0, 9, 0),
        {"sampler_kernel": "flashinfer"},
        "v0.9.0 v1/sample/ops/topk_topp_sampler.py forward_cuda: FlashInfer samples from the "
        "float32 logits (top_k_top_p_sampling_from_logits); v0.8.5 from softmax probabilities",
    ),
    _Rule(
        (0, 9, 1),
        {"non_kv": "increase_since_init"},
        "v0.9.1 v1/worker/gpu_worker.py determine_available_memory: memory_profiling from the "
        "init snapshot (v0.9.0 still subtracts all non-torch device memory)",
    ),
    _Rule(
        (0, 11, 0),
        {"distributed_init_in_budget": False},
        "v0.11.0 v1/worker/gpu_worker.py init_device: init_worker_distributed_environment "
        "before the MemorySnapshot (after it up to v0.10.1)",
    ),
    _Rule(
        (0, 11, 0),
        {"lazy_tp_communicator": True},
        "v0.11.0 distributed/device_communicators/base_device_communicator.py all_gather: "
        "torch.distributed.all_gather_into_tensor on the device group, whose NCCL communicator "
        "PyTorch creates at first use (parallel_state.py init_process_group has no device_id)",
    ),
    _Rule(
        (0, 12, 0),
        {"mxfp4_triton": True},
        "v0.12.0 model_executor/layers/quantization/mxfp4.py get_mxfp4_backend: Triton when "
        "has_triton_kernels() and sm90 <= capability < sm110, and vllm/third_party/"
        "triton_kernels ships from this release (v0.10.1 and v0.11.0 need it installed apart, "
        "else Marlin)",
    ),
    _Rule(
        (0, 12, 0),
        {"sampler_kernel": "sort"},
        "v0.12.0 v1/sample/ops/topk_topp_sampler.py: FlashInfer sampler only with "
        "VLLM_USE_FLASHINFER_SAMPLER=1",
    ),
    _Rule(
        (0, 14, 0),
        {"moe_workspace_persists": True},
        "v0.14.0 fused_moe/unquantized_fused_moe_method.py: TritonExperts in the modular kernel, "
        "whose _allocate_buffers takes current_workspace_manager()'s persistent buffers (v0.13.0 "
        "calls fused_experts, which allocates and frees its caches per call)",
    ),
    _Rule(
        (0, 17, 0),
        {"sampler_kernel": "triton"},
        "v0.17.0 v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p: Triton kernel for >= 8 rows",
    ),
    _Rule(
        (0, 18, 0),
        {"estimate_cudagraphs_env": True, "prints_graph_estimate": True},
        "v0.18.0 envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (default 0); "
        "v1/worker/gpu_worker.py determine_available_memory subtracts profile_cudagraph_memory "
        "when it is set",
    ),
    _Rule(
        (0, 20, 0),
        {"estimate_cudagraphs_default": True},
        "v0.20.0 envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1 (v0.19.1: 0; the log "
        "line says 'default since v0.21.0')",
    ),
    _Rule(
        (0, 21, 0),
        {"sampler_kernel": "flashinfer"},
        "v0.21.0 envs.py VLLM_USE_FLASHINFER_SAMPLER default True (where supported)",
    ),
    _Rule(
        (0, 25, 0),
        {"lazy_tp_communicator": False},
        "v0.25.1 distributed/device_communicators/cuda_communicator.py all_gather: through "
        "PyNccl, connected at init (v0.21.0 still used the base class; 0.22 to 0.24 unchecked)",
    ),
    _Rule(
        (0, 27, 0),
        {"non_kv": "free_delta"},
        "v0.27.0 utils/mem_utils.py memory_profiling: non_kv_cache_memory = total_consumed "
        "(free-memory drop since init) + transient_peak_headroom",
    ),
)

_V0 = Accounting(
    release=OLDEST_KNOWN,
    engine="v0",
    non_kv="increase_since_init",
    distributed_init_in_budget=True,
    estimate_cudagraphs_env=False,
    estimate_cudagraphs_default=False,
    prints_graph_estimate=False,
    sampler_in_profile=True,
    sampler_kernel="sort",
    profile_compiled=False,
    weights_include_draft=False,
    concurrency_whole_blocks=False,
    kv_budget_line="the rest of the memory reserved for KV Cache is XGiB",
    sources=(
        "v0.8.5 worker/worker.py determine_num_available_blocks: total x util - "
        "memory_profiling's non_kv_cache_memory (weights + torch peak increase + non-torch "
        "increase since the baseline snapshot, taken before distributed init)",
        "v0.8.5 worker/model_runner.py profile_run: max_num_batched_tokens over max_num_seqs "
        "prompts, sampled with top_p=0.99, top_k=vocab-1; eager; graphs captured after the KV "
        "cache, outside the budget",
        "v0.8.5 worker/model_runner.py load_model: the target model only (a draft model has "
        "its own worker)",
        "v0.8.5 executor/executor_base.py initialize_cache: '# cuda blocks: N' and "
        "concurrency = blocks x block_size / max_model_len",
    ),
)

# VLLM_USE_V1 defaults to 1 from v0.8.0 (envs.py; v0.7.3 defaults to 0); the V0 GPU worker
# is gone from v0.11.0 (no vllm/worker/worker.py; v0.10.1 still has it).
_V1_DEFAULT_SINCE: Release = (0, 8, 0)
_V0_REMOVED_IN: Release = (0, 11, 0)
_NEWEST_WITH_V0: Release = (0, 10, 1)


def parse_release(version: str | None) -> Release | None:
    """The (major, minor, patch) a version string names, or None if it names none.

    Local and build suffixes are ignored ('0.13.0+faa43dbf.nv26.01' is 0.13.0), and a
    development or release-candidate build counts as the release it leads to
    ('0.9.1.dev705+g01220ce89' is 0.9.1): vLLM's builds from main carry the next version.
    """
    if not version:
        return None
    m = _RELEASE_RE.match(version)
    if m is None:
        return None
    major, minor, patch = (int(part) if part else 0 for part in m.groups())
    return major, minor, patch


def release_or_zero(version: str | None) -> Release:
    """`parse_release`, with (0, 0, 0) for a string that names no release (for ordering)."""
    return parse_release(version) or (0, 0, 0)


def accounting_for(version: str | None, env: Mapping[str, str]) -> Accounting:
    """The accounting rules of vLLM `version` run with environment `env`.

    A missing or unparsable version gets the newest release's rules, and a release newer
    or older than those checked gets the nearest checked rules; `assumption` says so.
    VLLM_USE_V1=0 selects the V0 engine where it exists (before 0.11.0); before 0.8.0 V0
    is the default unless VLLM_USE_V1=1.
    """
    notes: list[str] = []
    release = parse_release(version)
    use_v1 = env.get(USE_V1_ENV)
    if release is None and use_v1 is not None and not _truthy(use_v1):
        # asking for V0 says the release has one: the newest checked that does
        notes.append(
            f"vLLM version not given: {USE_V1_ENV}=0 planned with the V0 accounting of "
            f"{_text(_NEWEST_WITH_V0)}, the newest release checked that has V0"
        )
        release = _NEWEST_WITH_V0
    elif release is None:
        shown = "not given" if not version else f"{version!r} is not a release number"
        notes.append(
            f"vLLM version {shown}: planned with the accounting of {_text(NEWEST_KNOWN)}, the "
            "newest release checked"
        )
        release = NEWEST_KNOWN
    elif release > NEWEST_KNOWN:
        notes.append(
            f"vLLM {_text(release)} is newer than the newest release checked "
            f"({_text(NEWEST_KNOWN)}): its accounting is assumed unchanged"
        )
    elif release < OLDEST_KNOWN:
        notes.append(
            f"vLLM {_text(release)} is older than the oldest release checked "
            f"({_text(OLDEST_KNOWN)}): planned with that release's accounting"
        )
    wants_v0 = (use_v1 is not None and not _truthy(use_v1)) or (
        use_v1 is None and release < _V1_DEFAULT_SINCE
    )
    if wants_v0 and release >= _V0_REMOVED_IN:
        notes.append(f"{USE_V1_ENV}=0 has no effect from vLLM 0.11.0 (V0 removed): planned as V1")
        wants_v0 = False
    rules = _V0 if wants_v0 else _v1_rules(release)
    if env.get(ESTIMATE_CUDAGRAPHS_ENV) is not None and not rules.estimate_cudagraphs_env:
        notes.append(
            f"{ESTIMATE_CUDAGRAPHS_ENV} has no effect on this engine (V1 from vLLM 0.18.0 only): "
            "CUDA graphs are planned outside the KV budget"
        )
    return dataclasses.replace(
        rules, release=release, assumption="; ".join(notes) if notes else None
    )


def _v1_rules(release: Release) -> Accounting:
    rules = _V1_BASE
    for rule in _V1_RULES:
        if release >= rule.since:
            rules = dataclasses.replace(rules, **rule.changes)  # type: ignore[arg-type]
            rules = dataclasses.replace(rules, sources=(*rules.sources, rule.source))
    return rules


def _truthy(flag: str) -> bool:
    return flag.strip().lower() not in {"0", "false", "no", "off", ""}


def _text(release: Release) -> str:
    return ".".join(str(part) for part in release)


NEWEST: Accounting = accounting_for(".".join(map(str, NEWEST_KNOWN)), {})
"""The rules of the newest release checked, with nothing assumed."""
