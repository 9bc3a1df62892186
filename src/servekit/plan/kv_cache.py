"""KV-cache bytes per token per GPU and the token capacity vLLM derives from them (core).

Full attention stores K and V per layer: 2 x kv_heads_per_rank x head_dim values.
MLA stores one latent vector (kv_lora_rank + qk_rope_head_dim values) per layer, the
same on every rank. MiniMax-M3's indexed sparse attention keeps the full-attention
cache on every layer plus a key-only indexer cache of index_head_dim values on each
sparse layer, replicated on every rank. A draft model adds its own layers' cache.

Capacity follows vLLM V1's KV cache manager (vllm/v1/core/kv_cache_utils.py,
get_kv_cache_groups and get_kv_cache_config_from_groups, v0.10 to v0.19): the layers are
split into KV cache groups of one attention type and equal layer count, every group's
block has the same page size, num_blocks = available // page // layers per group, the
printed token capacity is num_blocks // groups x the smallest block size (x the decode
context parallel size), and the concurrency is num_blocks over the blocks one request of
max_model_len takes summed over the groups (get_max_concurrency_for_kv_cache_config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from servekit.plan.inputs import PlanInputs
from servekit.plan.weights import kv_heads_per_rank
from servekit.units import KV_DTYPE_AUTO, dtype_bytes

KvTermKind = Literal["kv", "local_kv", "mla_latent", "indexer", "draft_kv"]
KvGroupKind = Literal["full", "sliding_window", "chunked", "mla"]
# vLLM splits the layers of each attention type into groups of `group_size` layers: the
# smallest type's layer count, or the largest's when it is under 1.5 times the smallest
# (kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size).
GROUP_SIZE_SLACK = 1.5


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
        local = m.local_attention
        full_layers = math.ceil((m.num_layers - m.local_layers) / inputs.pipeline_parallel_size)
        if full_layers:
            heads = kv_heads_per_rank(m.num_kv_heads, tp)
            terms.append(
                KvTerm(
                    "kv",
                    "K and V cache",
                    f"{full_layers} layers x 2 x max(1, {m.num_kv_heads} KV heads / TP {tp}) = "
                    f"{heads} x {m.head_dim} head_dim x {b:g} B",
                    round(full_layers * 2 * heads * m.head_dim * b),
                )
            )
        if local is not None and local.num_layers:
            n = math.ceil(local.num_layers / inputs.pipeline_parallel_size)
            kv_heads = local.num_kv_heads or m.num_kv_heads
            heads = kv_heads_per_rank(kv_heads, tp)
            head_dim = local.head_dim or m.head_dim
            name = "sliding-window" if local.kind == "sliding_window" else "chunked local"
            terms.append(
                KvTerm(
                    "local_kv",
                    f"K and V cache ({name}, window {local.window})",
                    f"{n} layers x 2 x max(1, {kv_heads} KV heads / TP {tp}) = {heads} "
                    f"x {head_dim} head_dim x {b:g} B",
                    round(n * 2 * heads * head_dim * b),
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


@dataclass(frozen=True, slots=True)
class KvCacheGroup:
    """One of vLLM's KV cache groups: layers of one attention type sharing a block table.

    Attributes:
        kind: the attention type ("full", "sliding_window", "chunked" or "mla").
        layers: layers in the group on the most loaded GPU (padding slots included).
        block_size: tokens per block of this group (raised when its page was unified).
        page_bytes: bytes of one block of one layer of the group.
        window: the sliding window or chunk length, for local attention.
    """

    kind: KvGroupKind
    layers: int
    block_size: int
    page_bytes: int
    window: int | None = None

    def blocks_per_request(self, inputs: PlanInputs) -> int:
        """Blocks one request of max_model_len tokens holds in this group (the spec's
        max_memory_usage_bytes / page_size_bytes in vllm/v1/kv_cache_interface.py)."""
        length = inputs.max_model_len
        batched = inputs.max_num_batched_tokens
        if self.kind == "sliding_window" and self.window is not None:
            # the last window - 1 computed tokens plus a chunk of new ones, +1 for a window
            # that does not start on a block boundary (SlidingWindowSpec)
            return math.ceil(min(self.window - 1 + batched, length) / self.block_size) + 1
        if self.kind == "chunked" and self.window is not None:
            # the current chunk plus a chunk of new tokens (ChunkedLocalAttentionSpec)
            return math.ceil(min(self.window + batched, length) / self.block_size)
        # full attention and MLA: each decode-context-parallel rank keeps 1/dcp of the tokens
        dcp = inputs.decode_context_parallel_size
        return math.ceil(math.ceil(length / dcp) / self.block_size)


@dataclass(frozen=True, slots=True)
class KvLayout:
    """How vLLM lays the KV cache of one GPU out in blocks.

    Attributes:
        groups: the KV cache groups.
        bytes_per_block: memory one block id takes across every layer of a group (the
            pool's divisor: num_blocks = available // bytes_per_block).
        warnings: what the planner could not follow exactly.
    """

    groups: tuple[KvCacheGroup, ...]
    bytes_per_block: int
    warnings: tuple[str, ...] = ()

    def num_blocks(self, kv_cache_bytes: float) -> int:
        """Blocks the available KV memory holds (get_kv_cache_config_from_groups)."""
        if kv_cache_bytes <= 0:
            return 0
        return int(kv_cache_bytes // self.bytes_per_block)

    def tokens(self, num_blocks: int, inputs: PlanInputs) -> int:
        """vLLM's "GPU KV cache size": blocks per group x the smallest block size, times the
        decode context parallel size (kv_cache_utils.py, _report_kv_cache_config)."""
        smallest = min(g.block_size for g in self.groups)
        return num_blocks // len(self.groups) * smallest * inputs.decode_context_parallel_size

    def blocks_per_request(self, inputs: PlanInputs) -> int:
        """Block ids one request of max_model_len takes, summed over the groups."""
        return sum(g.blocks_per_request(inputs) for g in self.groups)

    def max_concurrency(self, num_blocks: int, inputs: PlanInputs) -> float:
        """vLLM's "Maximum concurrency" (get_max_concurrency_for_kv_cache_config)."""
        return num_blocks / self.blocks_per_request(inputs)

    def request_bytes(self, inputs: PlanInputs) -> int:
        """KV memory one request of max_model_len needs (the engine's start-up check)."""
        return self.blocks_per_request(inputs) * self.bytes_per_block


@dataclass(frozen=True, slots=True)
class _LayerType:
    kind: KvGroupKind
    layers: int
    page_bytes: int
    window: int | None


def kv_layout(inputs: PlanInputs) -> KvLayout:
    """Return the KV cache groups and block size of one GPU, as vLLM derives them."""
    m = inputs.model
    block = inputs.block_size
    local = m.local_attention
    types = _layer_types(inputs)
    if local is None or not local.num_layers or len(types) == 1:
        # One attention type: a single group whose block spans every layer's page
        # (_get_kv_cache_groups_uniform_spec / _uniform_type).
        only = types[0] if len(types) == 1 else None
        kind: KvGroupKind = only.kind if only else ("mla" if m.attention == "mla" else "full")
        window = only.window if only else None
        per_block = kv_bytes_per_token(inputs) * block
        layers = math.ceil((only.layers if only else m.num_layers) / inputs.pipeline_parallel_size)
        return KvLayout((KvCacheGroup(kind, layers, block, per_block, window),), per_block)
    warnings: list[str] = []
    page = max(t.page_bytes for t in types)
    unified: list[tuple[_LayerType, int, int]] = []  # (type, block size, page bytes)
    for t in types:
        if page % t.page_bytes == 0:
            # unify_kv_cache_spec_page_size: a smaller page takes more tokens per block
            unified.append((t, block * (page // t.page_bytes), page))
        else:
            warnings.append(
                f"KV page sizes {t.page_bytes} and {page} bytes do not divide: vLLM cannot "
                "unify them by block size (older releases refuse to start); planned with the "
                "smaller page padded to the larger"
            )
            unified.append((t, block, page))
    counts = [t.layers for t in types]
    group_size = min(counts)
    if max(counts) < min(counts) * GROUP_SIZE_SLACK:
        group_size = max(counts)
    groups: list[KvCacheGroup] = []
    for t, size, page_bytes in unified:
        for _ in range(math.ceil(t.layers / group_size)):
            groups.append(KvCacheGroup(t.kind, group_size, size, page_bytes, t.window))
    # Under pipeline parallelism each stage holds its share of every group's layers.
    stage_layers = math.ceil(group_size / inputs.pipeline_parallel_size)
    return KvLayout(tuple(groups), page * stage_layers, tuple(warnings))


def _layer_types(inputs: PlanInputs) -> list[_LayerType]:
    """The model's attention layer types (whole model) with their page bytes per GPU."""
    m = inputs.model
    tp = inputs.tensor_parallel_size
    block = inputs.block_size
    b = kv_cache_dtype_bytes(inputs)
    if m.attention != "full" or m.local_attention is None or not m.local_attention.num_layers:
        return []
    local = m.local_attention
    out: list[_LayerType] = []
    full_layers = m.num_layers - local.num_layers
    full_page = round(block * 2 * kv_heads_per_rank(m.num_kv_heads, tp) * m.head_dim * b)
    if full_layers:
        out.append(_LayerType("full", full_layers, full_page, None))
    heads = kv_heads_per_rank(local.num_kv_heads or m.num_kv_heads, tp)
    local_page = round(block * 2 * heads * (local.head_dim or m.head_dim) * b)
    out.append(_LayerType(local.kind, local.num_layers, local_page, local.window))
    d = inputs.draft
    if d is not None and d.num_layers and d.num_kv_heads and d.head_dim:
        draft_page = round(block * 2 * kv_heads_per_rank(d.num_kv_heads, tp) * d.head_dim * b)
        if full_layers and draft_page == full_page:
            out[0] = _LayerType("full", full_layers + d.num_layers, full_page, None)
        else:
            out.append(_LayerType("full", d.num_layers, draft_page, None))
    return out


def kv_capacity_tokens(kv_cache_bytes: float, inputs: PlanInputs) -> int:
    """Tokens vLLM reports the KV cache holds ("GPU KV cache size")."""
    layout = kv_layout(inputs)
    return layout.tokens(layout.num_blocks(kv_cache_bytes), inputs)


def max_concurrency(tokens: int, inputs: PlanInputs) -> float:
    """Requests of max_model_len tokens the cache holds at once (vLLM's 'Maximum concurrency')
    for a single-group cache holding `tokens`; hybrid models use KvLayout.max_concurrency."""
    layout = kv_layout(inputs)
    blocks = tokens // inputs.block_size // inputs.decode_context_parallel_size
    return layout.max_concurrency(blocks * len(layout.groups), inputs)
