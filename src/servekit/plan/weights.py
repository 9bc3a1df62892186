"""Weights per GPU under tensor, expert and pipeline parallelism (core).

Counts parameters per rank the way vLLM shards them: vocab-parallel embeddings and
LM head (vocabulary padded to a multiple of 64), column-parallel Q/K/V and MLP-up
projections, row-parallel output and MLP-down projections, KV heads replicated when
the TP size exceeds them, norms and routers replicated, experts split by their
intermediate size under TP or whole experts per rank under EP.

A checkpoint quantized on its routed experts only (quantized_layers "experts": gpt-oss's
MXFP4, Kimi-K2's INT4) keeps attention, dense MLPs, shared experts and embeddings in the
model dtype. MXFP4 experts take the layout of the MoE kernel vLLM picks for the GPU and release
(see `mxfp4_expert_bytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servekit.plan.inputs import PlanInputs
from servekit.plan.quantization import Mxfp4Backend, lookup_scheme, mxfp4_moe_backend
from servekit.units import dtype_bytes

VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of this before splitting it
# MXFP4 MoE weights are allocated padded to the kernel's tile, then converted to its layout
# in process_weights_after_loading (vllm/model_executor/layers/quantization/mxfp4.py at
# v0.10.1 to v0.18.0; v0.19.0 fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_
# intermediate_size and convert_to_mxfp4_moe_kernel_format). "Model loading took" is the
# torch memory allocated after that conversion (utils/mem_utils.py DeviceMemoryProfiler).
# - Marlin needs n % 256 == 0 and k % 128 == 0: intermediate to 128, hidden to 256; the
#   repacked weights keep 4 bits a value, the scales stay 1-byte E8M0
#   (marlin_utils_fp4.py), the biases are in the model dtype.
# - Triton (matmul_ogs, Hopper layouts): intermediate to 64, hidden as is; the values are
#   swizzled with both byte dimensions padded to 64 (triton_kernels tensor_details/layout_
#   details/hopper_value.py HopperMXValueLayout.swizzle_data), the scales copied into
#   HopperMXScaleLayout (num_warps 8: the non-K dimension padded to 256, K to 2) while the
#   loaded uint8 scales stay registered on the layer, and the biases become float32.
# - FlashInfer TRT-LLM (sm100): both rounded up to 256, scales 1 byte, biases float32.
MXFP4_MARLIN_INTERMEDIATE_ALIGN = 128
MXFP4_MARLIN_HIDDEN_ALIGN = 256
MXFP4_SM100_ALIGN = 256
MXFP4_TRITON_INTERMEDIATE_ALIGN = 64
HOPPER_VALUE_ALIGN = 64  # HopperMXValueLayout SWIZZLE_ALIGN_M / SWIZZLE_ALIGN_K
HOPPER_SCALE_ALIGN_M = 2 * 8 * 2 * 8  # HopperMXScaleLayout: 2 x num_warps x 2 x 8
HOPPER_SCALE_ALIGN_K = 2
MXFP4_BLOCK = 32  # values per E8M0 scale
FLOAT32_BYTES = 4


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
    scheme = lookup_scheme(m.quantization)
    quant = scheme.bytes_per_param(gpu_has_fp8=inputs.gpu.fp8)
    # the bytes per parameter of linear layers outside the routed experts
    linear = act if m.quantized_layers == "experts" else quant
    h = m.hidden_size
    stage_share = math.ceil(m.num_layers / pp) / m.num_layers

    vocab_rows = math.ceil(math.ceil(m.vocab_size / VOCAB_PADDING) * VOCAB_PADDING / tp)
    table = vocab_rows * h * act
    heads = 1 if m.tie_word_embeddings else 2
    on_one_stage = 1 if pp > 1 and not m.embeddings_on_every_stage else heads
    embeddings = table * on_one_stage

    attention = _attention_params(inputs) * linear * stage_share
    dense_layers = m.num_layers - m.moe_layers
    dense_mlp = 3 * h * m.intermediate_size / tp * dense_layers * linear * stage_share

    experts = 0.0
    other = (2 * h * m.num_layers + h) * act * stage_share  # RMSNorm weights, replicated
    if m.attention_sinks:
        # one learned sink logit per attention head, split across ranks, in the model dtype
        # as vllm/model_executor/models/gpt_oss.py allocates OAIAttention.sinks
        other += m.num_attention_heads / tp * m.num_layers * act * stage_share
    if m.moe is not None:
        moe = m.moe
        inter: float = moe.expert_intermediate_size
        if not inputs.enable_expert_parallel:
            inter /= tp  # TP splits every expert by its intermediate size
        local = moe.num_experts
        if inputs.enable_expert_parallel:
            local = math.ceil(moe.num_experts / tp)  # whole experts per rank
        if scheme.name == "mxfp4":
            triton = inputs.accounting.mxfp4_triton
            backend = mxfp4_moe_backend(inputs.gpu.sm, triton_kernels=triton)
            per_expert = mxfp4_expert_bytes(h, inter, backend, bias=moe.expert_bias, act=act)
        else:
            bias = (2 * inter + h) * act if moe.expert_bias else 0.0
            per_expert = 3 * h * inter * quant + bias
        shared_size = moe.shared_expert_intermediate_size or moe.expert_intermediate_size
        shared = moe.num_shared_experts * 3 * h * shared_size / tp
        experts = (local * per_expert + shared * linear) * m.moe_layers * stage_share
        other += h * moe.num_experts * m.moe_layers * act * stage_share  # router, replicated
    if m.sparse is not None:
        s = m.sparse
        index_params = (
            h * s.index_heads * s.index_head_dim + h * s.index_head_dim + h * s.index_heads
        )
        other += index_params * m.sparse_layers * linear * stage_share  # indexer, replicated
    if m.mla is not None:
        other += (m.mla.kv_lora_rank + (m.mla.q_lora_rank or 0)) * m.num_layers * act * stage_share
    if m.vision is not None and inputs.load_vision:
        other += m.vision.params * act / (tp if inputs.mm_encoder_tp else 1)
    if m.rope_cache is not None:
        other += rope_cache_bytes(inputs)

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


def rope_cache_bytes(inputs: PlanInputs) -> float:
    """The rotary cos/sin buffer: positions x rotary_dim values, whole on every GPU.

    vLLM's RotaryEmbedding.__init__ registers it as the `cos_sin_cache` buffer while the
    model is built on the GPU (vllm/model_executor/layers/rotary_embedding/base.py), so it
    is part of "Model loading took"; get_rope shares one table between all layers.
    """
    rope = inputs.model.rope_cache
    if rope is None:
        return 0.0
    width = dtype_bytes("float32" if rope.dtype == "float32" else inputs.model.dtype)
    return rope.positions * rope.rotary_dim * width


def mxfp4_expert_dims(hidden: int, intermediate: float, backend: Mxfp4Backend) -> tuple[int, int]:
    """(hidden, per-rank intermediate) of an MXFP4 expert as vLLM allocates it for `backend`."""
    if backend == "flashinfer":
        return _round_up(hidden, MXFP4_SM100_ALIGN), _round_up(intermediate, MXFP4_SM100_ALIGN)
    if backend == "triton":
        return hidden, _round_up(intermediate, MXFP4_TRITON_INTERMEDIATE_ALIGN)
    return (
        _round_up(hidden, MXFP4_MARLIN_HIDDEN_ALIGN),
        _round_up(intermediate, MXFP4_MARLIN_INTERMEDIATE_ALIGN),
    )


def mxfp4_expert_bytes(
    hidden: int, intermediate: float, backend: Mxfp4Backend, *, bias: bool, act: float
) -> float:
    """Bytes one MXFP4 expert (gate/up w13 and down w2) holds after vLLM converts it for
    `backend`: values, scales and biases, as the layouts above allocate them."""
    h, i = mxfp4_expert_dims(hidden, intermediate, backend)
    if backend != "triton":
        values = 3 * h * i / 2  # 4 bits a value; Marlin's repack keeps the byte count
        scales = 3 * h * i / MXFP4_BLOCK  # one E8M0 byte per 32 values
        bias_width = act if backend == "marlin" else FLOAT32_BYTES
        return values + scales + ((2 * i + h) * bias_width if bias else 0.0)
    w13_values = _round_up(h / 2, HOPPER_VALUE_ALIGN) * _round_up(2 * i, HOPPER_VALUE_ALIGN)
    w2_values = _round_up(h, HOPPER_VALUE_ALIGN) * _round_up(i / 2, HOPPER_VALUE_ALIGN)
    w13_k, w2_k = math.ceil(h / MXFP4_BLOCK), math.ceil(i / MXFP4_BLOCK)
    swizzled = _round_up(2 * i, HOPPER_SCALE_ALIGN_M) * _round_up(
        w13_k, HOPPER_SCALE_ALIGN_K
    ) + _round_up(h, HOPPER_SCALE_ALIGN_M) * _round_up(w2_k, HOPPER_SCALE_ALIGN_K)
    loaded = 2 * i * w13_k + h * w2_k  # the uint8 parameters, still registered
    biases = (2 * i + h) * FLOAT32_BYTES if bias else 0.0
    return w13_values + w2_values + swizzled + loaded + biases


def _round_up(value: float, multiple: int) -> int:
    return math.ceil(value / multiple) * multiple


def _attention_params(inputs: PlanInputs) -> float:
    """Attention projection parameters of all layers on one rank (full and local layers)."""
    m = inputs.model
    local = m.local_attention
    if m.mla is not None or local is None or not local.num_layers:
        return _attention_params_per_layer(inputs) * m.num_layers
    full = _attention_params_per_layer(inputs) * (m.num_layers - local.num_layers)
    return full + local.num_layers * _gqa_params(
        inputs, local.num_kv_heads or m.num_kv_heads, local.head_dim or m.head_dim
    )


def _gqa_params(inputs: PlanInputs, num_kv_heads: int, head_dim: int) -> float:
    """Q, K, V and output projections of one grouped-query attention layer on one rank."""
    m = inputs.model
    tp = inputs.tensor_parallel_size
    h = m.hidden_size
    q_cols = m.num_attention_heads / tp * head_dim
    kv_cols = kv_heads_per_rank(num_kv_heads, tp) * head_dim
    return h * (q_cols + 2 * kv_cols) + q_cols * h


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
    return _gqa_params(inputs, m.num_kv_heads, m.head_dim)
