"""Planner inputs (core): everything the memory plan depends on, as one frozen value.

`plan_inputs` turns a validated profile plus a GPU catalog entry into `PlanInputs`;
the planner itself never sees YAML or files.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from servekit.errors import ConfigError
from servekit.plan.engine_rules import NEWEST, Accounting, accounting_for
from servekit.profiles.schema import Profile, tensor_parallel_error
from servekit.specs import (
    NO_DRAFT_FACTS,
    ArchitectureSpec,
    DraftSpec,
    GpuSpec,
    ModelSpec,
    QuantizedLayers,
)

# vLLM's default KV block size for CUDA attention backends.
DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """The model, GPU and engine settings one memory plan is made for."""

    model: ModelSpec
    gpu: GpuSpec
    draft: DraftSpec | None
    max_model_len: int
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enable_expert_parallel: bool = False
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    gpu_memory_utilization: float = 0.9
    block_size: int = DEFAULT_BLOCK_SIZE
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: int | None = None
    enforce_eager: bool = False
    max_cudagraph_capture_size: int | None = None
    mm_profiling: bool = False
    mm_encoder_tp: bool = True
    load_vision: bool = True
    estimate_cudagraphs: bool = True
    engine_version: str = ""
    decode_context_parallel_size: int = 1
    accounting: Accounting = NEWEST

    @property
    def decode_query_len(self) -> int:
        """Tokens each request verifies per decode step: 1 + k with speculation."""
        return 1 + (self.draft.num_speculative_tokens if self.draft else 0)


def model_spec(
    name: str,
    arch: ArchitectureSpec,
    quantization: str,
    quantized_layers: QuantizedLayers = "linear",
) -> ModelSpec:
    """Build a ModelSpec from validated architecture facts."""
    facts = {f.name: getattr(arch, f.name) for f in fields(arch)}
    return ModelSpec(
        **facts, name=name, quantization=quantization, quantized_layers=quantized_layers
    )


def plan_inputs(profile: Profile, gpu: GpuSpec, arch: ArchitectureSpec | None = None) -> PlanInputs:
    """Return the planner inputs a profile describes.

    Args:
        profile: a validated profile.
        gpu: the catalog entry of the profile's GPU.
        arch: architecture facts read from a checkpoint, overriding the profile's.

    Raises:
        ConfigError: the profile has no architecture facts, or its settings contradict them.
    """
    facts = arch or profile.model.architecture
    if facts is None:
        raise ConfigError(
            f"profile {profile.name} has no model.architecture facts",
            fix="add model.architecture to the profile or pass plan --model-dir CHECKPOINT_DIR",
        )
    args = profile.serve_args
    model = model_spec(
        profile.name,
        facts,
        effective_quantization(profile.model.quantization, args.quantization),
        profile.model.quantized_layers,
    )
    tensor_parallel_error(facts, args.tensor_parallel_size, raise_as=ConfigError)
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    required = model.sparse.required_block_size if model.sparse else None
    if required is not None and block_size != required:
        raise ConfigError(
            f"block_size {block_size} does not work for this model's sparse attention",
            fix=f"set serve_args.block_size: {required}",
        )
    spec = profile.speculative
    draft = None
    if spec is not None:
        known = spec.draft or NO_DRAFT_FACTS
        draft = DraftSpec(
            **{f.name: getattr(known, f.name) for f in fields(known)},
            method=spec.config.method,
            num_speculative_tokens=spec.config.num_speculative_tokens,
        )
    # the engine version and env decide the accounting (V0/V1, the graph estimate's default)
    accounting = accounting_for(profile.engine.version, profile.env)
    return PlanInputs(
        model=model,
        gpu=gpu,
        draft=draft,
        max_model_len=args.max_model_len,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size or 1,
        enable_expert_parallel=bool(args.enable_expert_parallel),
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        block_size=block_size,
        kv_cache_dtype=args.kv_cache_dtype or "auto",
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        enforce_eager=bool(args.enforce_eager),
        max_cudagraph_capture_size=args.max_cudagraph_capture_size,
        mm_profiling=model.vision is not None
        and not args.skip_mm_profiling
        and not args.language_model_only,
        mm_encoder_tp=args.mm_encoder_tp_mode != "data",
        load_vision=not args.language_model_only,
        estimate_cudagraphs=accounting.estimate_cudagraphs(profile.env),
        engine_version=profile.engine.version,
        decode_context_parallel_size=args.decode_context_parallel_size or 1,
        accounting=accounting,
    )


# Checkpoint formats vLLM's online `--quantization fp8` quantizes at load time: a 16-bit
# checkpoint's linear layers are cast to FP8 with per-tensor scales as they are loaded
# (vllm/model_executor/layers/quantization/fp8.py, Fp8OnlineLinearMethod / Fp8LinearMethod
# with is_checkpoint_fp8_serialized False), so the GPU holds 1 byte per linear weight.
_ONLINE_QUANTIZABLE = frozenset({"bf16", "fp16", "bfloat16", "float16"})


def effective_quantization(checkpoint: str, requested: str | None) -> str:
    """The weight scheme the GPU holds: the checkpoint's, or FP8 when `--quantization fp8`
    asks vLLM to quantize a 16-bit checkpoint online at load time."""
    if requested is not None and requested.lower() == "fp8" and checkpoint in _ONLINE_QUANTIZABLE:
        return "fp8"
    return checkpoint
