"""Planner inputs (core): everything the memory plan depends on, as one frozen value.

`plan_inputs` turns a validated profile plus a GPU catalog entry into `PlanInputs`;
the planner itself never sees YAML or files.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.errors import ConfigError
from servekit.profiles.schema import ArchitectureFacts, Profile, tensor_parallel_error
from servekit.specs import (
    DraftSpec,
    GpuSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
    SparseIndexSpec,
    VisionSpec,
)

# vLLM's default KV block size for CUDA attention backends.
DEFAULT_BLOCK_SIZE = 16
# The CUDA-graph memory estimate is budgeted by default from this vLLM release on.
ESTIMATE_CUDAGRAPHS_DEFAULT_SINCE = (0, 21, 0)
ESTIMATE_CUDAGRAPHS_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"


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

    @property
    def decode_query_len(self) -> int:
        """Tokens each request verifies per decode step: 1 + k with speculation."""
        return 1 + (self.draft.num_speculative_tokens if self.draft else 0)


def parse_version(text: str) -> tuple[int, int, int]:
    """Parse 'v0.26.0' or '0.25.1rc1' into (0, 26, 0); unknown parts become 0."""
    parts: list[int] = []
    for piece in text.lstrip("v").split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece else ""
        parts.append(int(digits) if digits and piece[0].isdigit() else 0)
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def model_spec(name: str, arch: ArchitectureFacts, quantization: str) -> ModelSpec:
    """Build a ModelSpec from validated architecture facts."""
    moe = arch.moe
    return ModelSpec(
        name=name,
        attention=arch.attention,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_kv_heads=arch.num_kv_heads,
        head_dim=arch.head_dim,
        vocab_size=arch.vocab_size,
        intermediate_size=arch.intermediate_size,
        dtype=arch.dtype,
        tie_word_embeddings=arch.tie_word_embeddings,
        first_dense_layers=moe.first_dense_layers if moe else 0,
        moe=MoeSpec(
            num_experts=moe.num_experts,
            top_k=moe.top_k,
            expert_intermediate_size=moe.expert_intermediate_size,
            num_shared_experts=moe.num_shared_experts,
            shared_expert_intermediate_size=moe.shared_expert_intermediate_size,
        )
        if moe
        else None,
        mla=MlaSpec(**arch.mla.model_dump()) if arch.mla else None,
        sparse=SparseIndexSpec(**arch.sparse.model_dump()) if arch.sparse else None,
        vision=VisionSpec(**arch.vision.model_dump()) if arch.vision else None,
        quantization=quantization,
    )


def plan_inputs(
    profile: Profile, gpu: GpuSpec, arch: ArchitectureFacts | None = None
) -> PlanInputs:
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
    model = model_spec(profile.name, facts, profile.model.quantization)
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
        facts_d = spec.draft
        draft = DraftSpec(
            method=spec.config.method,
            num_speculative_tokens=spec.config.num_speculative_tokens,
            params=facts_d.params if facts_d else 0,
            dtype=facts_d.dtype if facts_d else "bfloat16",
            num_layers=facts_d.num_layers if facts_d else 0,
            num_kv_heads=facts_d.num_kv_heads if facts_d else 0,
            head_dim=facts_d.head_dim if facts_d else 0,
        )
    env_flag = profile.env.get(ESTIMATE_CUDAGRAPHS_ENV)
    if env_flag is None:
        estimate = parse_version(profile.engine.version) >= ESTIMATE_CUDAGRAPHS_DEFAULT_SINCE
    else:
        estimate = env_flag.strip().lower() not in {"0", "false", "no", "off", ""}
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
        estimate_cudagraphs=estimate,
        engine_version=profile.engine.version,
    )
