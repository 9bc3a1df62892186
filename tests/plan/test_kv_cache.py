"""Known answers for KV-cache bytes per token per GPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servekit.plan import PlanInputs
from servekit.plan.kv_cache import kv_bytes_per_token, kv_capacity_tokens, kv_terms, max_concurrency

Build = Callable[..., PlanInputs]


def test_llama_70b_tp4_bf16(inputs_for: Build) -> None:
    """Llama-3.1-70B at TP4 in bf16 stores 81,920 bytes per token per GPU."""
    assert kv_bytes_per_token(inputs_for("llama-3.1-70b-4xh100")) == 81_920


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_deepseek_v3_mla_same_at_any_tp(inputs_for: Build, tp: int) -> None:
    """DeepSeek-V3's MLA cache is 70,272 bytes per token per GPU whatever the TP size."""
    assert (
        kv_bytes_per_token(
            inputs_for(
                "deepseek-v3-8xh200", f"tensor_parallel_size={tp}", f"hardware.gpus_per_node={tp}"
            )
        )
        == 70_272
    )


def test_kv_heads_replicated_beyond_tp(inputs_for: Build) -> None:
    """Llama-70B's 8 KV heads at TP 16 leave one replicated head per rank (80*2*128*2)."""
    assert (
        kv_bytes_per_token(
            inputs_for(
                "llama-3.1-70b-4xh100", "tensor_parallel_size=16", "hardware.gpus_per_node=16"
            )
        )
        == 40_960
    )


def test_m3_sparse_attention_derivation(inputs_for: Build) -> None:
    """M3 at TP8: 60x2x1x128x2 main cache + 57x128x2 indexer cache = 45,312 bytes."""
    inputs = inputs_for("minimax-m3-mxfp8-8xa800-no-eagle3")
    terms = {t.label: t.bytes_per_token for t in kv_terms(inputs)}
    assert terms == {"K and V cache": 30_720, "indexer key cache": 14_592}
    assert kv_bytes_per_token(inputs) == 45_312


def test_m3_eagle3_draft_adds_its_layer(inputs_for: Build) -> None:
    """The EAGLE3 draft layer (8 KV heads, TP8 -> 1 per rank) adds 1x2x1x128x2 = 512 bytes."""
    assert kv_bytes_per_token(inputs_for("minimax-m3-mxfp8-8xa800")) == 45_312 + 512


def test_fp8_kv_cache_halves_bytes(inputs_for: Build) -> None:
    """An fp8 KV cache stores one byte per value."""
    assert kv_bytes_per_token(inputs_for("llama-3.1-70b-4xh100", "kv_cache_dtype=fp8")) == 40_960


def test_capacity_counts_whole_blocks(inputs_for: Build) -> None:
    """Capacity is whole blocks of block_size tokens; concurrency divides by blocks per request."""
    inputs = inputs_for("minimax-m3-mxfp8-8xa800-no-eagle3")
    per_block = 45_312 * 128
    assert kv_capacity_tokens(per_block * 10 + per_block - 1, inputs) == 10 * 128
    assert kv_capacity_tokens(-5.0, inputs) == 0
    assert max_concurrency(2048 * 128, inputs) == pytest.approx(2.0)
