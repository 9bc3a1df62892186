"""Shared domain values (core): model architecture, draft model, GPU and quantization facts.

These are frozen dataclasses built from validated profile and catalog data; the
planner and renderers take them and never touch files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

AttentionKind = Literal["full", "mla", "sparse_indexed"]


@dataclass(frozen=True, slots=True)
class MoeSpec:
    """Mixture-of-experts facts of a model's MoE layers."""

    num_experts: int
    top_k: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int | None = None  # defaults to the expert size


@dataclass(frozen=True, slots=True)
class MlaSpec:
    """Multi-head latent attention facts (DeepSeek-V2/V3 style)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None


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

    dense_attention_layers: int
    index_heads: int
    index_head_dim: int
    sparse_block_size: int
    top_k_blocks: int
    required_block_size: int | None = None


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
    """

    num_layers: int
    hidden_size: int
    intermediate_size: int
    patches_per_token: int = 4
    values_per_patch: int = 0
    projector_width: int | None = None

    @property
    def params(self) -> int:
        """Encoder parameters: layers (attention 4w^2 + MLP 2wi) and a per-patch projector."""
        w = self.hidden_size
        layers = self.num_layers * (4 * w * w + 2 * w * self.intermediate_size)
        p = self.projector_width or 0
        return layers + w * p + p * p


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Architecture facts the planner needs, independent of any checkpoint file."""

    name: str
    attention: AttentionKind
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    dtype: str = "bfloat16"
    tie_word_embeddings: bool = False
    first_dense_layers: int = 0  # leading layers with a dense MLP when moe is set
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    sparse: SparseIndexSpec | None = None
    quantization: str = "bf16"
    vision: VisionSpec | None = None
    sources: tuple[str, ...] = field(default=())

    @property
    def moe_layers(self) -> int:
        """Number of layers whose MLP is a mixture of experts."""
        return 0 if self.moe is None else self.num_layers - self.first_dense_layers

    @property
    def sparse_layers(self) -> int:
        """Number of layers that carry an indexer (sparse attention)."""
        return 0 if self.sparse is None else self.num_layers - self.sparse.dense_attention_layers


@dataclass(frozen=True, slots=True)
class DraftSpec:
    """A speculative-decoding draft model as the planner sees it.

    Attributes:
        method: vLLM speculative method (eagle3, draft_model, mtp, ngram ...).
        num_speculative_tokens: k, draft tokens proposed per step.
        params: draft parameters loaded on the GPUs (0 for ngram).
        dtype: storage dtype of the draft weights.
        num_layers: draft transformer layers holding KV cache.
        num_kv_heads: KV heads of each draft layer.
        head_dim: head dimension of the draft layers.
    """

    method: str
    num_speculative_tokens: int
    params: int = 0
    dtype: str = "bfloat16"
    num_layers: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0


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

    @property
    def sm(self) -> int:
        """Compute capability as an integer such as 80 or 90."""
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)
