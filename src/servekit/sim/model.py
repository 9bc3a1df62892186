"""What the simulator needs to know about a deployment (core), derived from the memory plan.

Per-GPU bytes and FLOPs: weights outside the experts, bytes per expert (all MoE layers),
FLOPs per token on one token's path, KV bytes read per context token, and the KV pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.plan import MemoryPlan
from servekit.plan.weights import kv_heads_per_rank


@dataclass(frozen=True, slots=True)
class SimModel:
    """Per-GPU facts of one deployment that the step-time model reads.

    Attributes:
        nonexpert_bytes: weights read by every step whatever the batch (draft excluded).
        expert_bytes: bytes of one expert across all MoE layers (0 for dense models).
        num_experts: routed experts per MoE layer (0 for dense models).
        top_k: experts per token.
        shared_experts: experts every token uses.
        flops_per_token: FLOPs of one token through the target model on one GPU.
        attention_flops_per_ctx_token: extra FLOPs per (query token x context token).
        kv_bytes_per_token: KV bytes per cached token on one GPU.
        attended_context_cap: context tokens a sparse-attention query reads (None: all).
        indexer_bytes_per_token: bytes a sparse-attention query reads per context token
            to choose its blocks (indexer keys).
        hbm_bytes_s: memory bandwidth of one GPU, bytes/s.
        peak_flops: dense BF16 FLOP/s of one GPU.
        num_gpu_blocks: KV blocks in the pool.
        block_size: tokens per block.
        max_model_len: longest request (prompt + output).
    """

    nonexpert_bytes: float
    expert_bytes: float
    num_experts: int
    top_k: int
    shared_experts: int
    flops_per_token: float
    attention_flops_per_ctx_token: float
    kv_bytes_per_token: float
    attended_context_cap: int | None
    indexer_bytes_per_token: float
    hbm_bytes_s: float
    peak_flops: float
    num_gpu_blocks: int
    block_size: int
    max_model_len: int


def sim_model(plan: MemoryPlan, *, num_gpu_blocks: int | None = None) -> SimModel:
    """Return the simulator's view of a planned deployment.

    Args:
        plan: the memory plan of the profile (sizes the KV pool).
        num_gpu_blocks: KV blocks to simulate instead of the plan's.
    """
    i = plan.inputs
    m = i.model
    tp = i.tensor_parallel_size
    w = plan.weights
    moe = m.moe
    slots = (moe.num_experts + moe.num_shared_experts) if moe else 0
    expert_bytes = w.experts_bytes / slots if slots else 0.0
    h = m.hidden_size

    # One token's path: attention projections, dense MLPs, top-k + shared experts, LM head.
    q_cols = m.num_attention_heads * m.head_dim
    kv_cols = kv_heads_per_rank(m.num_kv_heads, tp) * tp * m.head_dim
    attention = m.num_layers * (h * (q_cols + 2 * kv_cols) + q_cols * h)
    dense_layers = m.num_layers if moe is None else m.first_dense_layers
    dense = dense_layers * 3 * h * m.intermediate_size
    routed = 0
    if moe is not None:
        shared_size = moe.shared_expert_intermediate_size or moe.expert_intermediate_size
        routed = (
            m.moe_layers
            * 3
            * h
            * (moe.top_k * moe.expert_intermediate_size + moe.num_shared_experts * shared_size)
        )
    lm_head = m.vocab_size * h
    flops_per_token = 2 * (attention + dense + routed + lm_head) / tp
    # QK^T and PV per context token: 2 x 2 x heads x head_dim FLOPs per layer.
    attn_ctx = 4 * m.num_attention_heads / tp * m.head_dim * m.num_layers

    cap = None
    indexer = 0.0
    if m.sparse is not None:
        cap = m.sparse.top_k_blocks * m.sparse.sparse_block_size
        index_term = next((t for t in plan.kv_terms if t.kind == "indexer"), None)
        indexer = float(index_term.bytes_per_token) if index_term else 0.0
    blocks = num_gpu_blocks
    if blocks is None:
        blocks = max(plan.kv_cache_tokens // i.block_size, 0)
    return SimModel(
        nonexpert_bytes=w.total_bytes - w.experts_bytes - w.draft_bytes,
        expert_bytes=expert_bytes,
        num_experts=moe.num_experts if moe else 0,
        top_k=moe.top_k if moe else 0,
        shared_experts=moe.num_shared_experts if moe else 0,
        flops_per_token=flops_per_token,
        attention_flops_per_ctx_token=attn_ctx,
        kv_bytes_per_token=float(plan.kv_bytes_per_token),
        attended_context_cap=cap,
        indexer_bytes_per_token=indexer,
        hbm_bytes_s=i.gpu.hbm_gb_s * 1e9,
        peak_flops=i.gpu.bf16_dense_tflops * 1e12,
        num_gpu_blocks=blocks,
        block_size=i.block_size,
        max_model_len=i.max_model_len,
    )


def experts_touched(model: SimModel, num_tokens: int) -> float:
    """Expected distinct experts one MoE layer loads for a batch of tokens (uniform routing).

    Each token picks top_k of E experts; an expert is untouched by all N tokens with
    probability (1 - k/E)^N, so E x (1 - (1 - k/E)^N) are loaded, plus the shared experts.
    """
    if model.num_experts == 0 or num_tokens <= 0:
        return float(model.shared_experts if num_tokens > 0 else 0)
    miss = (1 - model.top_k / model.num_experts) ** num_tokens
    return model.num_experts * (1 - miss) + model.shared_experts
