"""KV-cache bytes per token per GPU, with the derivation spelled out (core).

Full attention stores K and V per layer: 2 x kv_heads_per_rank x head_dim values.
MLA stores one latent vector (kv_lora_rank + qk_rope_head_dim values) per layer, the
same on every rank. MiniMax-M3's indexed sparse attention keeps the full-attention
cache on every layer plus a key-only indexer cache of index_head_dim values on each
sparse layer, replicated on every rank. A draft model adds its own layers' cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from servekit.plan.inputs import PlanInputs
from servekit.plan.weights import kv_heads_per_rank
from servekit.units import KV_DTYPE_AUTO, dtype_bytes

KvTermKind = Literal["kv", "mla_latent", "indexer", "draft_kv"]


@dataclass(frozen=True, slots=True)
class KvTerm:
    """One additive term of the per-token KV size, with how it was computed.

    Attributes:
        kind: what the term stores, for code to find it (the label is for people).
        label: display name.
        formula: the arithmetic, spelled out.
        bytes_per_token: the term's bytes per token per GPU.
    """

    kind: KvTermKind
    label: str
    formula: str
    bytes_per_token: int


def kv_cache_dtype_bytes(inputs: PlanInputs) -> float:
    """Bytes per cached value: the model dtype for 'auto', else the named cache dtype."""
    name = inputs.model.dtype if inputs.kv_cache_dtype == KV_DTYPE_AUTO else inputs.kv_cache_dtype
    return dtype_bytes(name)


def kv_terms(inputs: PlanInputs) -> list[KvTerm]:
    """Return the additive terms of the KV bytes per token held by one GPU."""
    m = inputs.model
    tp = inputs.tensor_parallel_size
    layers = math.ceil(m.num_layers / inputs.pipeline_parallel_size)
    b = kv_cache_dtype_bytes(inputs)
    terms: list[KvTerm] = []
    if m.attention == "mla" and m.mla is not None:
        width = m.mla.kv_lora_rank + m.mla.qk_rope_head_dim
        terms.append(
            KvTerm(
                "mla_latent",
                "MLA latent cache",
                f"{layers} layers x ({m.mla.kv_lora_rank} + {m.mla.qk_rope_head_dim}) values "
                f"x {b:g} B",
                round(layers * width * b),
            )
        )
    else:
        heads = kv_heads_per_rank(m.num_kv_heads, tp)
        terms.append(
            KvTerm(
                "kv",
                "K and V cache",
                f"{layers} layers x 2 x max(1, {m.num_kv_heads} KV heads / TP {tp}) = {heads} "
                f"x {m.head_dim} head_dim x {b:g} B",
                round(layers * 2 * heads * m.head_dim * b),
            )
        )
    if m.attention == "sparse_indexed" and m.sparse is not None:
        sparse_layers = math.ceil(m.sparse_layers / inputs.pipeline_parallel_size)
        terms.append(
            KvTerm(
                "indexer",
                "indexer key cache",
                f"{sparse_layers} sparse layers x {m.sparse.index_head_dim} values x {b:g} B "
                "(key only, replicated on every rank)",
                round(sparse_layers * m.sparse.index_head_dim * b),
            )
        )
    d = inputs.draft
    if d is not None and d.num_layers and d.num_kv_heads and d.head_dim:
        heads = kv_heads_per_rank(d.num_kv_heads, tp)
        terms.append(
            KvTerm(
                "draft_kv",
                f"draft model ({d.method}) K and V cache",
                f"{d.num_layers} layers x 2 x {heads} KV heads x {d.head_dim} x {b:g} B",
                round(d.num_layers * 2 * heads * d.head_dim * b),
            )
        )
    return terms


def kv_bytes_per_token(inputs: PlanInputs) -> int:
    """Return the KV-cache bytes one token occupies on one GPU."""
    return sum(t.bytes_per_token for t in kv_terms(inputs))


def kv_capacity_tokens(kv_cache_bytes: float, inputs: PlanInputs) -> int:
    """Tokens the KV cache holds: whole blocks of block_size tokens."""
    per_block = kv_bytes_per_token(inputs) * inputs.block_size
    if kv_cache_bytes <= 0:
        return 0
    return int(kv_cache_bytes // per_block) * inputs.block_size


def max_concurrency(tokens: int, inputs: PlanInputs) -> float:
    """Requests of max_model_len tokens the cache holds at once (vLLM's 'Maximum concurrency')."""
    blocks_per_request = math.ceil(inputs.max_model_len / inputs.block_size)
    return (tokens // inputs.block_size) / blocks_per_request
