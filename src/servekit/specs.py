"""Shared domain values (core): model architecture, draft model, GPU and step-time facts.

These frozen dataclasses are the one definition of each fact: the profile schema validates
them directly (pydantic reads the constraints annotated on each field), and the planner,
renderers and simulator take them and never touch files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, ClassVar, Literal, get_type_hints

from annotated_types import Ge, Gt, Le

from servekit.errors import SimulationError

AttentionKind = Literal["full", "mla", "sparse_indexed"]
LocalAttentionKind = Literal["sliding_window", "chunked"]
# Which linear layers a checkpoint's quantization covers: every linear layer but the
# embeddings, LM head, norms and routers ("linear"), or the routed experts only ("experts",
# as gpt-oss's MXFP4 and Kimi-K2's INT4 checkpoints ship).
QuantizedLayers = Literal["linear", "experts"]
ModelDtype = Literal["bfloat16", "float16"]

# Constraints are metadata on the field types (annotated_types, which pydantic reads), so the
# profile schema validates these dataclasses directly and no second field list exists.
Count = Annotated[int, Ge(0)]
Milliseconds = Annotated[float, Ge(0)]
Fraction = Annotated[float, Gt(0), Le(1)]
# Upper bounds are physical sanity limits far above any released model (the largest have
# 128 attention heads, 256 experts, a hidden size of 18432 and a 1M vocabulary): a value
# past them is a typo, and would make the planner compute for hours.
MAX_HEADS = 1 << 12
MAX_WIDTH = 1 << 20
MAX_LAYERS = 1 << 12
MAX_VOCAB = 1 << 24
MAX_EXPERTS = 1 << 16
Heads = Annotated[int, Gt(0), Le(MAX_HEADS)]
Width = Annotated[int, Gt(0), Le(MAX_WIDTH)]
OptionalWidth = Annotated[int | None, Gt(0), Le(MAX_WIDTH)]
WidthCount = Annotated[int, Ge(0), Le(MAX_WIDTH)]
Layers = Annotated[int, Gt(0), Le(MAX_LAYERS)]
LayerCount = Annotated[int, Ge(0), Le(MAX_LAYERS)]
Experts = Annotated[int, Gt(0), Le(MAX_EXPERTS)]
ExpertCount = Annotated[int, Ge(0), Le(MAX_EXPERTS)]

# pydantic reads `__pydantic_config__` when it validates a plain dataclass: unknown keys in a
# profile are errors, as for every other profile section.
_FORBID_EXTRA: dict[str, str] = {"extra": "forbid"}


@dataclass(frozen=True, slots=True)
class MoeSpec:
    """Mixture-of-experts facts of a model's MoE layers."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    num_experts: Experts
    top_k: Experts
    expert_intermediate_size: Width
    num_shared_experts: ExpertCount = 0
    shared_expert_intermediate_size: OptionalWidth = None  # defaults to the expert size
    first_dense_layers: LayerCount = 0  # leading layers with a dense MLP
    # after the leading dense layers, every layer_step-th layer is MoE and the others dense
    # (Llama 4's interleave_moe_layer_step, Qwen2-MoE's decoder_sparse_step)
    layer_step: Annotated[int, Gt(0), Le(MAX_LAYERS)] = 1
    # each routed expert has gate/up and down biases (gpt-oss: FusedMoE(has_bias=True))
    expert_bias: bool = False


@dataclass(frozen=True, slots=True)
class LocalAttentionSpec:
    """Layers that attend to a bounded window instead of the whole context.

    Attributes:
        kind: "sliding_window" (each token sees the last `window` tokens: Gemma 2/3,
            gpt-oss, Mistral 7B) or "chunked" (each token sees its own `window`-token
            chunk: Llama 4's local layers).
        window: the window or chunk length in tokens.
        num_layers: how many of the model's layers are local; the others are full attention
            (equal to the model's layer count when every layer is local).
        num_kv_heads: KV heads of the local layers when they differ from the full layers'.
        head_dim: head dimension of the local layers when it differs from the full layers'.
    """

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    kind: LocalAttentionKind = "sliding_window"
    window: Width = 4096
    num_layers: LayerCount = 0
    num_kv_heads: Annotated[int | None, Gt(0), Le(MAX_HEADS)] = None
    head_dim: OptionalWidth = None


@dataclass(frozen=True, slots=True)
class RopeCacheSpec:
    """The rotary embedding's cos/sin table vLLM keeps on every GPU (one per model).

    vLLM's RotaryEmbedding registers a `cos_sin_cache` buffer of `positions` rows by
    `rotary_dim` values (vllm/model_executor/layers/rotary_embedding/base.py), shared by
    all layers through get_rope's cache; it counts in "Model loading took".

    Attributes:
        positions: rows: config max_position_embeddings, or for YaRN and DeepSeek-YaRN
            scaling original_max_position_embeddings x factor.
        rotary_dim: values per row: head_dim x partial_rotary_factor (qk_rope_head_dim for MLA).
        dtype: "model" (the default get_rope dtype) or "float32" where the model passes it
            (gpt-oss).
    """

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    positions: Annotated[int, Gt(0), Le(1 << 30)]
    rotary_dim: Width
    dtype: Literal["model", "float32"] = "model"


@dataclass(frozen=True, slots=True)
class MlaSpec:
    """Multi-head latent attention facts (DeepSeek-V2/V3 style)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    kv_lora_rank: Width
    qk_rope_head_dim: Width
    qk_nope_head_dim: Width
    v_head_dim: Width
    q_lora_rank: OptionalWidth = None


@dataclass(frozen=True, slots=True)
class SparseIndexSpec:
    """Indexed sparse attention (MiniMax-M3 MSA): full KV kept, plus a key-only index cache.

    Attributes:
        dense_attention_layers: leading layers that use plain full attention (no indexer).
        index_heads: indexer query heads.
        index_head_dim: width of the indexer key stored per token on each sparse layer.
        sparse_block_size: tokens per selectable block.
        top_k_blocks: blocks each query attends to.
        required_block_size: KV-cache block size the engine requires for this model, if any.
    """

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    dense_attention_layers: LayerCount
    index_heads: Heads
    index_head_dim: Width
    sparse_block_size: Width
    top_k_blocks: Width
    required_block_size: OptionalWidth = None


@dataclass(frozen=True, slots=True)
class VisionSpec:
    """Vision encoder (ViT) facts of a multimodal model.

    Attributes:
        num_layers: encoder transformer layers.
        hidden_size: encoder width.
        intermediate_size: encoder MLP width.
        patches_per_token: encoder patches merged into one language-model token.
        values_per_patch: pixel values per patch (channels x temporal x patch^2), the input.
        projector_width: width of a per-patch projector MLP (width -> p -> p), if any.
        max_tokens_per_item: vLLM's maximum tokens per item of the modality it profiles
            the encoder with (the processor's get_mm_max_tokens_per_item, or the placeholder
            embeds of its largest dummy item); the multimodal budget counts items in these.
            None: the dummy item fills max_model_len (MiniMax-M3's capped video).
        patches_per_item: encoder input patches of that dummy item, padding and class
            tokens included; None: max_tokens_per_item x patches_per_token.
        dense_block_mask: the encoder builds one dense additive attention mask over all the
            batch's patches in the model dtype (transformers' Pixtral
            generate_block_attention_mask, which vLLM's HF Pixtral encoder uses when
            xformers is absent).
        params_override: encoder and projector parameters counted from the encoder's own
            layer shapes, used instead of the formula in `params` when set (encoders that
            are not that shape: gated MLPs, biases, position tables, patch mergers).
    """

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    num_layers: Layers
    hidden_size: Width
    intermediate_size: Width
    patches_per_token: Width = 4
    values_per_patch: WidthCount = 0
    projector_width: OptionalWidth = None
    max_tokens_per_item: OptionalWidth = None
    patches_per_item: OptionalWidth = None
    dense_block_mask: bool = False
    params_override: Annotated[int | None, Ge(0)] = None

    @property
    def params(self) -> int:
        """Encoder parameters: `params_override` when set, else layers (attention 4w^2 +
        MLP 2wi) and a per-patch projector."""
        if self.params_override is not None:
            return self.params_override
        w = self.hidden_size
        layers = self.num_layers * (4 * w * w + 2 * w * self.intermediate_size)
        p = self.projector_width or 0
        return layers + w * p + p * p


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchitectureSpec:
    """Architecture facts of the served language model, as a profile or config.json states them."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    attention: AttentionKind = "full"
    num_layers: Layers
    hidden_size: Width
    num_attention_heads: Heads
    num_kv_heads: Heads
    head_dim: Width
    vocab_size: Annotated[int, Gt(0), Le(MAX_VOCAB)]
    intermediate_size: Width
    tie_word_embeddings: bool = False
    dtype: ModelDtype = "bfloat16"
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    sparse: SparseIndexSpec | None = None
    vision: VisionSpec | None = None
    local_attention: LocalAttentionSpec | None = None
    attention_sinks: bool = False  # one learned sink logit per attention head (gpt-oss)
    # vLLM builds the embedding and LM head on every pipeline stage, not only on the first
    # and last (its Qwen2/3-MoE, Mixtral, Gemma and gpt-oss model files make them
    # unconditionally; Llama-style files put PPMissingLayer on the other stages)
    embeddings_on_every_stage: bool = False
    rope_cache: RopeCacheSpec | None = None

    @property
    def first_dense_layers(self) -> int:
        """Leading layers with a dense MLP when the model has MoE layers."""
        return 0 if self.moe is None else self.moe.first_dense_layers

    @property
    def moe_layers(self) -> int:
        """Number of layers whose MLP is a mixture of experts: after the leading dense
        layers, layers i with (i + 1) % layer_step == 0 (0-based), as vLLM's Llama 4 and
        Qwen2-MoE place them."""
        if self.moe is None:
            return 0
        step = self.moe.layer_step
        return sum(
            1 for i in range(self.first_dense_layers, self.num_layers) if (i + 1) % step == 0
        )

    @property
    def local_layers(self) -> int:
        """Number of layers with sliding-window or chunked local attention."""
        return 0 if self.local_attention is None else self.local_attention.num_layers

    @property
    def sparse_layers(self) -> int:
        """Number of layers that carry an indexer (sparse attention)."""
        return 0 if self.sparse is None else self.num_layers - self.sparse.dense_attention_layers


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec(ArchitectureSpec):
    """Architecture facts the planner needs, with the model's name and quantization."""

    name: str
    quantization: str = "bf16"
    quantized_layers: QuantizedLayers = "linear"
    sources: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class DraftFacts:
    """A speculative-decoding draft model's own facts, as a profile states them.

    Attributes:
        params: draft parameters loaded on the GPUs (0 for ngram).
        dtype: storage dtype of the draft weights.
        num_layers: draft transformer layers holding KV cache.
        num_kv_heads: KV heads of each draft layer.
        head_dim: head dimension of the draft layers.
        sources: where the figures come from.
    """

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    params: Count
    dtype: ModelDtype = "bfloat16"
    num_layers: LayerCount = 1
    num_kv_heads: Annotated[int, Ge(0), Le(MAX_HEADS)] = 0
    head_dim: WidthCount = 0
    sources: tuple[str, ...] = ()


# What the planner assumes about a draft whose facts the profile does not state.
NO_DRAFT_FACTS = DraftFacts(params=0, num_layers=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftSpec(DraftFacts):
    """A speculative-decoding draft model as the planner sees it: its facts plus the method.

    Attributes:
        method: vLLM speculative method (eagle3, draft_model, mtp, ngram ...).
        num_speculative_tokens: k, draft tokens proposed per step.
    """

    method: str
    num_speculative_tokens: int


def _plausible(lo: float, hi: float) -> dict[str, tuple[float, float]]:
    """Field metadata: a step coefficient's physically plausible range (what `sim fit` searches)."""
    return {"plausible": (lo, hi)}


@dataclass(frozen=True, slots=True)
class StepTimeParams:
    """Coefficients of the simulator's step-time model (milliseconds unless named otherwise).

    The one definition of the coefficients: a profile's `simulator.step` section is validated
    as this class, and `sim fit` searches each field's `plausible` range (docs/simulator.md).

    Attributes:
        base_ms: fixed cost of every step: scheduling, sampling, the per-layer kernel
            floor and all-reduce latencies of a step that does almost nothing.
        hbm_efficiency: fraction of the GPU's memory bandwidth achieved when reading
            weights and KV cache.
        compute_efficiency: fraction of the GPU's dense BF16 peak achieved by GEMMs.
        decode_request_ms: per running request decoding one token (decode attention path).
        verify_request_ms: per request verifying k+1 tokens with speculative decoding
            (a multi-token query; for some attention backends a prefill-shaped path).
        prefill_request_ms: per request with a prefill chunk in the step.
        draft_pass_ms: fixed cost of one draft-model forward pass (k passes per step).
        draft_request_ms: per request per draft pass.
    """

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA

    base_ms: Milliseconds = field(metadata=_plausible(0.5, 30.0))
    hbm_efficiency: Fraction = field(metadata=_plausible(0.3, 0.85))
    compute_efficiency: Fraction = field(metadata=_plausible(0.1, 0.6))
    decode_request_ms: Milliseconds = field(default=0.0, metadata=_plausible(0.0, 3.0))
    verify_request_ms: Milliseconds = field(default=0.0, metadata=_plausible(0.0, 20.0))
    prefill_request_ms: Milliseconds = field(default=0.0, metadata=_plausible(0.0, 30.0))
    draft_pass_ms: Milliseconds = field(default=0.0, metadata=_plausible(0.2, 5.0))
    draft_request_ms: Milliseconds = field(default=0.0, metadata=_plausible(0.0, 2.0))

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _FRACTIONS and not 0 < value <= 1:
                raise SimulationError(
                    f"simulator {f.name} {value} is outside (0, 1]",
                    fix="use the fraction of peak the GPU achieves, e.g. 0.6",
                )
            if f.name not in _FRACTIONS and value < 0:
                raise SimulationError(
                    f"simulator {f.name} must not be negative",
                    fix=f"set {f.name} to 0 or a positive number of milliseconds",
                )


_FRACTIONS = frozenset(
    name
    for name, hint in get_type_hints(StepTimeParams, include_extras=True).items()
    if hint == Fraction
)


def step_coefficients() -> dict[str, tuple[float, float]]:
    """Every step coefficient's name and plausible (low, high) range, in declaration order."""
    return {f.name: f.metadata["plausible"] for f in fields(StepTimeParams)}


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model from the catalog (per-GPU figures)."""

    name: str
    memory_mib: int  # as nvidia-smi reports the card
    cuda_visible_mib: int  # what cudaMemGetInfo reports as total, which vLLM budgets from
    hbm_gb_s: float
    nvlink_gb_s: float | None
    compute_capability: str
    fp8: bool
    bf16_dense_tflops: float
    sources: tuple[str, ...] = field(default=())
    device_name: str = ""  # the name NVML and torch report, e.g. "NVIDIA H100 80GB HBM3"
    unified_memory: bool = False  # CPU and GPU share one memory (GB10): NVML reports no total
    sm_count: int | None = None  # streaming multiprocessors; None where the catalog has none

    @property
    def sm(self) -> int:
        """Compute capability as an integer such as 80 or 90."""
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)
