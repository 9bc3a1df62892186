"""Weights per GPU for experts-only quantization, interleaved MoE layers and online FP8.

Corpus figures (benchmarks/corpus/real-startups/startups.jsonl, "Model loading took"):
gpt-oss-20b MXFP4 7.01 GiB per GPU at TP2 on H100, Llama-3.1-8B with --quantization fp8
8.49 GiB on H100.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from known_models import GPT_OSS_20B, LLAMA4_SCOUT, LLAMA31_8B

from servekit.hardware import lookup_gpu
from servekit.plan import PlanInputs
from servekit.plan.inputs import effective_quantization, model_spec
from servekit.plan.quantization import lookup_scheme
from servekit.plan.weights import mxfp4_expert_dims, weights_per_gpu
from servekit.specs import ArchitectureSpec, MoeSpec, RopeCacheSpec, VisionSpec
from servekit.units import GIB

Build = Callable[..., PlanInputs]


def inputs(
    arch: ArchitectureSpec, quant: str, layers: str, tp: int, gpu: str, ep: bool = False
) -> PlanInputs:
    """Planner inputs for a hand-built architecture with a quantization and GPU."""
    return PlanInputs(
        model=model_spec("test", arch, quant, "experts" if layers == "experts" else "linear"),
        gpu=lookup_gpu(gpu),
        draft=None,
        max_model_len=8192,
        tensor_parallel_size=tp,
        enable_expert_parallel=ep,
    )


def test_experts_only_quantization_keeps_attention_in_bf16() -> None:
    """gpt-oss-20b: attention 24 x (2880 x (2048 + 2 x 256) + 2048 x 2880) x 2 B at TP2."""
    w = weights_per_gpu(inputs(GPT_OSS_20B, "mxfp4", "experts", 2, "H100"))
    assert w.attention_bytes == 24 * (2880 * (2048 + 2 * 256) + 2048 * 2880) * 2
    all_linear = weights_per_gpu(inputs(GPT_OSS_20B, "mxfp4", "linear", 2, "H100"))
    assert all_linear.attention_bytes < w.attention_bytes / 3
    assert w.experts_bytes == all_linear.experts_bytes


def test_mxfp4_experts_padded_to_the_kernel_tile() -> None:
    """Marlin pads hidden to 256 and the per-rank intermediate to 128, Triton the
    intermediate to 64, FlashInfer (sm100) both to 256."""
    assert mxfp4_expert_dims(2880, 2880, "marlin") == (3072, 2944)
    assert mxfp4_expert_dims(2880, 1440, "marlin") == (3072, 1536)
    assert mxfp4_expert_dims(2880, 1440, "triton") == (2880, 1472)
    assert mxfp4_expert_dims(2880, 1440, "flashinfer") == (3072, 1536)
    assert mxfp4_expert_dims(2880, 2880, "flashinfer") == (3072, 3072)
    w = weights_per_gpu(inputs(GPT_OSS_20B, "mxfp4", "experts", 2, "B200"))
    per_param = lookup_scheme("mxfp4").bytes_per_param(gpu_has_fp8=True)
    bias = (2 * 1536 + 3072) * 4  # FlashInfer keeps the expert biases in float32
    assert w.experts_bytes == pytest.approx(24 * 32 * (3 * 3072 * 1536 * per_param + bias))


def test_gpt_oss_20b_tp2_h100_near_the_log() -> None:
    """gpt-oss-20b MXFP4 at TP2 on H100 plans 6.99 GiB against the logged 7.01 GiB (vLLM
    0.19.0 runs the Triton kernel there; Marlin's padding would plan 7.10 GiB)."""
    arch = dataclasses.replace(
        GPT_OSS_20B, rope_cache=RopeCacheSpec(positions=4096 * 32, rotary_dim=64, dtype="float32")
    )
    w = weights_per_gpu(inputs(arch, "mxfp4", "experts", 2, "H100"))
    assert w.total_bytes / GIB == pytest.approx(7.01, rel=0.01)
    assert round(w.total_bytes / GIB, 2) == 6.99


def test_attention_sinks_add_one_value_per_head_and_layer() -> None:
    """Sinks add 64 heads / TP2 x 24 layers x 2 B to the replicated remainder."""
    with_sinks = weights_per_gpu(inputs(GPT_OSS_20B, "mxfp4", "experts", 2, "H100"))
    arch = dataclasses.replace(GPT_OSS_20B, attention_sinks=False)
    without = weights_per_gpu(inputs(arch, "mxfp4", "experts", 2, "H100"))
    assert with_sinks.other_bytes - without.other_bytes == 32 * 24 * 2


def test_layer_step_puts_dense_mlps_on_the_other_layers() -> None:
    """Llama-4-Maverick style (48 layers, every 2nd MoE): 24 dense MLPs of 16384, 24 MoE layers."""
    moe = MoeSpec(num_experts=128, top_k=1, expert_intermediate_size=8192, layer_step=2)
    arch = dataclasses.replace(LLAMA4_SCOUT, moe=moe, local_attention=None)
    w = weights_per_gpu(inputs(arch, "bf16", "linear", 8, "H100"))
    assert w.dense_mlp_bytes == 3 * 5120 * 16384 / 8 * 24 * 2
    assert w.experts_bytes == 128 * 3 * 5120 * 8192 / 8 * 24 * 2


def test_online_fp8_is_the_effective_scheme(inputs_for: Build) -> None:
    """--quantization fp8 on a bf16 checkpoint plans fp8 linear weights; fp8 checkpoints stay."""
    assert effective_quantization("bf16", "fp8") == "fp8"
    assert effective_quantization("bf16", None) == "bf16"
    assert effective_quantization("int4_g128", "fp8") == "int4_g128"
    online = inputs_for("llama-3.1-70b-4xh100", "quantization=fp8")
    assert online.model.quantization == "fp8"
    plain = inputs_for("llama-3.1-70b-4xh100")
    assert weights_per_gpu(online).dense_mlp_bytes == weights_per_gpu(plain).dense_mlp_bytes / 2


def test_llama31_8b_online_fp8_near_the_log() -> None:
    """Llama-3.1-8B on H100: online FP8 8.49 GiB and bf16 14.99 GiB as logged (to 0.01 GiB).

    Both include the rotary cos/sin buffer: 131,072 positions x 128 x 2 B = 32 MiB.
    """
    arch = dataclasses.replace(
        LLAMA31_8B, rope_cache=RopeCacheSpec(positions=131_072, rotary_dim=128)
    )
    fp8 = weights_per_gpu(inputs(arch, effective_quantization("bf16", "fp8"), "", 1, "H100"))
    assert round(fp8.total_bytes / GIB, 2) == 8.49
    bf16 = weights_per_gpu(inputs(arch, "bf16", "", 1, "H100"))
    assert round(bf16.total_bytes / GIB, 2) == 14.99
    no_rope = weights_per_gpu(inputs(LLAMA31_8B, "bf16", "", 1, "H100"))
    assert bf16.other_bytes - no_rope.other_bytes == 131_072 * 128 * 2


def test_rope_cache_dtype_and_yarn_positions() -> None:
    """gpt-oss keeps its YaRN table (4096 x 32 positions) in float32: 131,072 x 64 x 4 B."""
    arch = dataclasses.replace(
        GPT_OSS_20B, rope_cache=RopeCacheSpec(positions=4096 * 32, rotary_dim=64, dtype="float32")
    )
    with_rope = weights_per_gpu(inputs(arch, "mxfp4", "experts", 2, "H100"))
    without = weights_per_gpu(inputs(GPT_OSS_20B, "mxfp4", "experts", 2, "H100"))
    assert with_rope.other_bytes - without.other_bytes == 131_072 * 64 * 4


def test_llama4_scout_tp4_rope_table_near_the_log() -> None:
    """Llama-4-Scout TP4: its 10,485,760-position rope table (2.5 GiB) brings 53.12 GiB to 1%."""
    arch = dataclasses.replace(
        LLAMA4_SCOUT,
        vision=VisionSpec(num_layers=34, hidden_size=1408, intermediate_size=5632),
        rope_cache=RopeCacheSpec(positions=10_485_760, rotary_dim=128),
    )
    w = weights_per_gpu(inputs(arch, "bf16", "", 4, "H100"))
    assert w.total_bytes / GIB == pytest.approx(53.12, rel=0.01)
    no_rope = weights_per_gpu(
        inputs(dataclasses.replace(arch, rope_cache=None), "bf16", "", 4, "H100")
    )
    assert (w.total_bytes - no_rope.total_bytes) / GIB == 2.5
