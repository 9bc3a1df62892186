"""vLLM's KV cache groups and token capacity for hybrid attention, against real startups.

Each case takes the "Available KV cache memory" a real vLLM 0.19.0 startup logged
(benchmarks/corpus/real-startups/startups.jsonl) and checks that the planner's block,
token and concurrency arithmetic reproduces the figures the same log printed. The logged
memory is rounded to 0.01 GiB, so the exact case uses the bytes the logged blocks occupy
(blocks x bytes per block, plus part of a block) and the rounded case checks the blocks
fall within the rounding of the printed GiB.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from known_models import GPT_OSS_20B, LLAMA4_SCOUT

from servekit.hardware import lookup_gpu
from servekit.plan import PlanInputs
from servekit.plan.fit import make_plan, plan_to_json
from servekit.plan.inputs import model_spec
from servekit.plan.kv_cache import kv_bytes_per_token, kv_capacity_tokens, kv_layout
from servekit.specs import ArchitectureSpec, LocalAttentionSpec, MlaSpec, MoeSpec
from servekit.units import GIB

# Mistral-7B-v0.1: every one of 32 layers attends to a 4096-token sliding window.
MISTRAL_7B_V01 = ArchitectureSpec(
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=32000,
    intermediate_size=14336,
    local_attention=LocalAttentionSpec(kind="sliding_window", window=4096, num_layers=32),
)
# DeepSeek-V2-Lite: 27 MLA layers, latent 512 + rope 64.
DEEPSEEK_V2_LITE = ArchitectureSpec(
    attention="mla",
    num_layers=27,
    hidden_size=2048,
    num_attention_heads=16,
    num_kv_heads=16,
    head_dim=192,
    vocab_size=102400,
    intermediate_size=10944,
    mla=MlaSpec(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    moe=MoeSpec(
        num_experts=64,
        top_k=6,
        expert_intermediate_size=1408,
        num_shared_experts=2,
        first_dense_layers=1,
    ),
)
# Kimi-K2 (DeepSeek-V3 architecture): 61 MLA layers.
KIMI_K2 = dataclasses.replace(DEEPSEEK_V2_LITE, num_layers=61, hidden_size=7168)


def inputs(arch: ArchitectureSpec, tp: int, max_model_len: int = 8192) -> PlanInputs:
    """Planner inputs with 8192 batched tokens and 1024 sequences on H100 (the corpus runs)."""
    return PlanInputs(
        model=model_spec("test", arch, "bf16"),
        gpu=lookup_gpu("H100"),
        draft=None,
        max_model_len=max_model_len,
        max_num_batched_tokens=8192,
        max_num_seqs=1024,
        tensor_parallel_size=tp,
    )


def test_gpt_oss_20b_tp2_groups() -> None:
    """gpt-oss-20b TP2: 12 full + 12 sliding layers make 2 groups of 12, 16,384-byte pages."""
    layout = kv_layout(inputs(GPT_OSS_20B, 2))
    assert [(g.kind, g.layers, g.block_size, g.page_bytes) for g in layout.groups] == [
        ("full", 12, 16, 16_384),
        ("sliding_window", 12, 16, 16_384),
    ]
    assert layout.bytes_per_block == 12 * 16_384


def test_gpt_oss_20b_tp2_reproduces_the_logged_figures() -> None:
    """323,972 blocks print as 2,591,776 tokens and 316.07x (512 + 513 blocks a request)."""
    i = inputs(GPT_OSS_20B, 2)
    layout = kv_layout(i)
    logged_bytes = 323_972 * layout.bytes_per_block + layout.bytes_per_block // 2
    blocks = layout.num_blocks(logged_bytes)
    assert blocks == 323_972
    assert layout.tokens(blocks, i) == 2_591_776
    assert layout.blocks_per_request(i) == 512 + 513
    assert f"{layout.max_concurrency(blocks, i):.2f}" == "316.07"
    assert kv_capacity_tokens(logged_bytes, i) == 2_591_776


def test_gpt_oss_20b_tp2_from_the_printed_gib() -> None:
    """From the printed 59.32 GiB the blocks are within the 0.005 GiB rounding of 323,972."""
    layout = kv_layout(inputs(GPT_OSS_20B, 2))
    window = 0.005 * GIB / layout.bytes_per_block
    assert abs(layout.num_blocks(59.32 * GIB) - 323_972) <= window


def test_llama4_scout_tp4_reproduces_the_logged_figures() -> None:
    """Scout TP4: 1 full + 3 chunked groups of 12; 91,495 blocks -> 365,968 tokens, 44.68x."""
    i = inputs(LLAMA4_SCOUT, 4)
    layout = kv_layout(i)
    assert [(g.kind, g.layers, g.page_bytes) for g in layout.groups] == [
        ("full", 12, 16_384),
        ("chunked", 12, 16_384),
        ("chunked", 12, 16_384),
        ("chunked", 12, 16_384),
    ]
    blocks = layout.num_blocks(91_495 * layout.bytes_per_block + 1)
    assert blocks == 91_495
    assert layout.tokens(blocks, i) == 365_968
    assert layout.blocks_per_request(i) == 4 * 512
    assert f"{layout.max_concurrency(blocks, i):.2f}" == "44.68"
    window = 0.005 * GIB / layout.bytes_per_block
    assert abs(layout.num_blocks(16.75 * GIB) - 91_495) <= window


def test_sliding_window_everywhere_is_one_group() -> None:
    """Mistral-7B v0.1 (all 32 layers sliding): one group, plain tokens, window-bound concurrency.

    Tokens are blocks x 16 as for full attention, but a 32k-token request holds only
    cdiv(min(4095 + 8192, 32768), 16) + 1 = 769 blocks, not 2,048.
    """
    i = inputs(MISTRAL_7B_V01, 1, max_model_len=32_768)
    layout = kv_layout(i)
    assert [(g.kind, g.layers) for g in layout.groups] == [("sliding_window", 32)]
    per_block = 16 * kv_bytes_per_token(i)
    assert per_block == 16 * 32 * 2 * 8 * 128 * 2
    blocks = layout.num_blocks(40 * GIB)
    assert blocks == 40 * GIB // per_block == 20_480
    assert layout.tokens(blocks, i) == 327_680
    assert layout.blocks_per_request(i) == 769
    assert layout.max_concurrency(blocks, i) == pytest.approx(20_480 / 769)


def test_deepseek_v2_lite_mla_unchanged() -> None:
    """DeepSeek-V2-Lite TP1 (43.61 GiB): 27 x 576 x 2 B x 16 per block, 1,505,552 tokens."""
    i = inputs(DEEPSEEK_V2_LITE, 1)
    layout = kv_layout(i)
    assert [(g.kind, g.layers, g.page_bytes) for g in layout.groups] == [
        ("mla", 27, 16 * 27 * 576 * 2)
    ]
    assert kv_capacity_tokens(94_097 * layout.bytes_per_block, i) == 1_505_552
    assert f"{layout.max_concurrency(94_097, i):.2f}" == "183.78"
    # the printed 43.61 GiB is rounded: 94,091 blocks, within its 0.005 GiB (10.8 blocks)
    assert kv_capacity_tokens(43.61 * GIB, i) == 94_091 * 16


def test_mla_decode_context_parallel_multiplies_tokens() -> None:
    """Kimi-K2 TP8, DCP8: the printed tokens are 8x the blocks x 16 (the log's 5,721,088)."""
    plain = inputs(KIMI_K2, 8)
    dcp = dataclasses.replace(plain, decode_context_parallel_size=8)
    per_block = kv_layout(dcp).bytes_per_block
    assert per_block == 16 * 61 * 576 * 2
    # 5,721,088 = 44,696 blocks x 16 x 8; 715,072 (the DCP1 run) = 44,692 blocks x 16
    assert kv_capacity_tokens(44_696 * per_block, dcp) == 5_721_088
    assert kv_capacity_tokens(44_692 * per_block, plain) == 715_072
    # both runs printed 46.80 GiB: 44,693 blocks, within its rounding (4.5 blocks)
    assert kv_capacity_tokens(46.80 * GIB, dcp) == 8 * kv_capacity_tokens(46.80 * GIB, plain)
    # each DCP rank keeps 1/8 of a request: cdiv(8192 / 8, 16) = 64 blocks, not 512
    assert kv_layout(dcp).blocks_per_request(dcp) == 64


def test_unequal_pages_are_unified_by_block_size() -> None:
    """Local layers with half the page (4 KV heads vs 8) take 32-token blocks (vLLM's unify)."""
    arch = dataclasses.replace(
        GPT_OSS_20B,
        local_attention=LocalAttentionSpec(
            kind="sliding_window", window=128, num_layers=12, num_kv_heads=4
        ),
    )
    i = inputs(arch, 1)
    layout = kv_layout(i)
    assert [(g.kind, g.block_size, g.page_bytes) for g in layout.groups] == [
        ("full", 16, 32_768),
        ("sliding_window", 32, 32_768),
    ]
    assert layout.tokens(1000, i) == 500 * 16
    assert layout.warnings == ()


def test_pages_that_do_not_divide_warn() -> None:
    """Pages 3 and 8 KV heads wide cannot be unified by block size: a warning, not an error."""
    arch = dataclasses.replace(
        GPT_OSS_20B,
        local_attention=LocalAttentionSpec(
            kind="sliding_window", window=128, num_layers=12, num_kv_heads=3
        ),
    )
    layout = kv_layout(inputs(arch, 1))
    assert layout.warnings
    assert "do not divide" in layout.warnings[0]


def test_plan_json_shows_groups_and_blocks() -> None:
    """plan --json carries the KV cache groups and gpu_blocks, consistent with the tokens."""
    doc = plan_to_json(make_plan(inputs(GPT_OSS_20B, 2))).as_json()
    groups = doc["kv_cache_groups"]
    assert isinstance(groups, list)
    assert len(groups) == 2
    assert groups[1] == {
        "kind": "sliding_window",
        "layers": 12,
        "block_size": 16,
        "page_bytes": 16_384,
        "window": 128,
    }
    blocks = doc["gpu_blocks"]
    assert isinstance(blocks, int)
    assert doc["kv_cache_tokens"] == blocks // 2 * 16


def test_profile_dcp_reaches_the_plan(inputs_for: Callable[..., PlanInputs]) -> None:
    """serve_args.decode_context_parallel_size multiplies the planned MLA tokens."""
    one = make_plan(inputs_for("deepseek-v3-8xh200"))
    eight = make_plan(inputs_for("deepseek-v3-8xh200", "decode_context_parallel_size=8"))
    assert eight.inputs.decode_context_parallel_size == 8
    assert eight.gpu_blocks == one.gpu_blocks
    assert eight.kv_cache_tokens == 8 * one.kv_cache_tokens
