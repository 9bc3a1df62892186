"""Weights per GPU under tensor, expert and pipeline parallelism (core).

Counts parameters per rank the way vLLM shards them: vocab-parallel embeddings and
LM head (vocabulary padded to a multiple of 64), column-parallel Q/K/V and MLP-up
projections, row-parallel output and MLP-down projections, KV heads replicated when
the TP size exceeds them, norms and routers replicated, experts split by their
intermediate size under TP or whole experts per rank under EP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servekit.plan.inputs import PlanInputs
from servekit.plan.quantization import lookup_scheme
from servekit.units import dtype_bytes

VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of this before splitting it


@dataclass(frozen=True, slots=True)
class WeightBreakdown:
    """Bytes of weights held by the most loaded GPU, by group."""

    embeddings_bytes: float
    attention_bytes: float
    dense_mlp_bytes: float
    experts_bytes: float
    other_bytes: float
    draft_bytes: float

    @property
    def total_bytes(self) -> float:
        """All weight bytes on the GPU, the draft model's included (vLLM loads both)."""
        return (
            self.embeddings_bytes
            + self.attention_bytes
            + self.dense_mlp_bytes
            + self.experts_bytes
            + self.other_bytes
            + self.draft_bytes
        )


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """KV heads each rank holds: split when tp <= heads, else one replicated head."""
    return max(1, num_kv_heads // tp)


def weights_per_gpu(inputs: PlanInputs) -> WeightBreakdown:
    """Return the weight bytes of the most loaded GPU.

    Under pipeline parallelism the layers are split evenly across stages and the most
    loaded stage is taken to hold ceil(layers / pp) layers plus the larger of the
    embedding and the LM head.
    """
    m = inputs.model
    tp = inputs.tensor_parallel_size
    pp = inputs.pipeline_parallel_size
    act = dtype_bytes(m.dtype)
    quant = lookup_scheme(m.quantization).bytes_per_param(gpu_has_fp8=inputs.gpu.fp8)
    h = m.hidden_size
    stage_share = math.ceil(m.num_layers / pp) / m.num_layers

    vocab_rows = math.ceil(math.ceil(m.vocab_size / VOCAB_PADDING) * VOCAB_PADDING / tp)
    table = vocab_rows * h * act
    heads = 1 if m.tie_word_embeddings else 2
    embeddings = table * (heads if pp == 1 else 1)

    attention = _attention_params_per_layer(inputs) * m.num_layers * quant * stage_share
    dense_layers = m.num_layers if m.moe is None else m.first_dense_layers
    dense_mlp = 3 * h * m.intermediate_size / tp * dense_layers * quant * stage_share

    experts = 0.0
    other = (2 * h * m.num_layers + h) * act * stage_share  # RMSNorm weights, replicated
    if m.moe is not None:
        moe = m.moe
        expert_params = 3 * h * moe.expert_intermediate_size
        if inputs.enable_expert_parallel:
            per_layer: float = math.ceil(moe.num_experts / tp) * expert_params
        else:
            per_layer = moe.num_experts * expert_params / tp
        shared_size = moe.shared_expert_intermediate_size or moe.expert_intermediate_size
        per_layer += moe.num_shared_experts * 3 * h * shared_size / tp
        experts = per_layer * m.moe_layers * quant * stage_share
        other += h * moe.num_experts * m.moe_layers * act * stage_share  # router, replicated
    if m.sparse is not None:
        s = m.sparse
        index_params = (
            h * s.index_heads * s.index_head_dim + h * s.index_head_dim + h * s.index_heads
        )
        other += index_params * m.sparse_layers * quant * stage_share  # indexer, replicated
    if m.mla is not None:
        other += (m.mla.kv_lora_rank + (m.mla.q_lora_rank or 0)) * m.num_layers * act * stage_share
    if m.vision is not None and inputs.load_vision:
        other += m.vision.params * act / (tp if inputs.mm_encoder_tp else 1)

    draft = 0.0
    if inputs.draft is not None and inputs.draft.params:
        draft = inputs.draft.params * dtype_bytes(inputs.draft.dtype) / tp
    return WeightBreakdown(
        embeddings_bytes=embeddings,
        attention_bytes=attention,
        dense_mlp_bytes=dense_mlp,
        experts_bytes=experts,
        other_bytes=other,
        draft_bytes=draft,
    )


def _attention_params_per_layer(inputs: PlanInputs) -> float:
    m = inputs.model
    tp = inputs.tensor_parallel_size
    h = m.hidden_size
    heads = m.num_attention_heads / tp
    if m.mla is not None:
        mla = m.mla
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            q = h * mla.q_lora_rank + mla.q_lora_rank * heads * qk
        else:
            q = h * heads * qk
        kv_a = h * (mla.kv_lora_rank + mla.qk_rope_head_dim)  # replicated on every rank
        kv_b = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
        out = heads * mla.v_head_dim * h
        return q + kv_a + kv_b + out
    q_cols = heads * m.head_dim
    kv_cols = kv_heads_per_rank(m.num_kv_heads, tp) * m.head_dim
    return h * (q_cols + 2 * kv_cols) + q_cols * h
