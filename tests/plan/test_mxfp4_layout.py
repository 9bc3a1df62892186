"""MXFP4 MoE experts in the layout of the kernel vLLM picks, by GPU and release.

Exact byte counts come from vLLM's source: the padding in quantization/mxfp4.py (v0.10.1)
and fused_moe/oracle/mxfp4.py (v0.19.0), Marlin's 1-byte E8M0 scales
(marlin_utils_fp4.py), and the Hopper swizzles of the vendored triton_kernels
(HopperMXValueLayout, HopperMXScaleLayout). The three checks against "Model loading took"
use real startups (benchmarks/corpus/real-startups/startups.jsonl) planned from the
models' config.json facts (configs.jsonl).
"""

from __future__ import annotations

import pytest
from known_models import corpus_config

from servekit.hardware import lookup_gpu
from servekit.plan import PlanInputs
from servekit.plan.engine_rules import accounting_for
from servekit.plan.inputs import model_spec
from servekit.plan.model_config import model_facts_from_config
from servekit.plan.quantization import mxfp4_moe_backend
from servekit.plan.weights import mxfp4_expert_bytes, weights_per_gpu
from servekit.units import GIB


def _gpt_oss(model: str, gpu: str, tp: int, version: str) -> PlanInputs:
    """Planner inputs for a gpt-oss checkpoint from its config, on a GPU and release."""
    facts = model_facts_from_config(corpus_config(model))
    spec = model_spec(model, facts.architecture, facts.quantization, facts.quantized_layers)
    return PlanInputs(
        model=spec,
        gpu=lookup_gpu(gpu),
        draft=None,
        max_model_len=8192,
        tensor_parallel_size=tp,
        accounting=accounting_for(version, {}),
    )


@pytest.mark.parametrize(
    ("sm", "version", "backend"),
    [
        (80, "0.10.1", "marlin"),  # _should_use_marlin: below sm90 always
        (80, "0.19.0", "marlin"),  # Triton needs (9, 0) <= capability < (11, 0)
        (89, "0.19.0", "marlin"),
        (90, "0.10.1", "marlin"),  # triton_kernels not shipped: the Marlin FP4 warning
        (90, "0.11.0", "marlin"),
        (90, "0.12.0", "triton"),  # vllm/third_party/triton_kernels from here on
        (90, "0.19.0", "triton"),
        (100, "0.10.1", "flashinfer"),
        (100, "0.19.0", "flashinfer"),  # FLASHINFER_TRTLLM_MXFP4_BF16 comes first
        (120, "0.19.0", "marlin"),  # neither TRT-LLM (sm100 family) nor Triton (< sm110)
    ],
)
def test_backend_by_gpu_and_release(sm: int, version: str, backend: str) -> None:
    """The kernel vLLM selects for MXFP4 MoE follows the capability and the release."""
    triton = accounting_for(version, {}).mxfp4_triton
    assert mxfp4_moe_backend(sm, triton_kernels=triton) == backend


def test_marlin_expert_bytes_exact() -> None:
    """gpt-oss expert at TP1 through Marlin: 3072 x 2944 padded, 4-bit values, one E8M0 byte
    per 32 values, bf16 biases of 2 x 2944 + 3072."""
    values = 3 * 3072 * 2944 // 2
    scales = 3 * 3072 * 2944 // 32
    bias = (2 * 2944 + 3072) * 2
    assert mxfp4_expert_bytes(2880, 2880, "marlin", bias=True, act=2) == values + scales + bias
    assert mxfp4_expert_bytes(2880, 2880, "marlin", bias=False, act=2) == values + scales


def test_triton_hopper_expert_bytes_exact() -> None:
    """gpt-oss expert at TP2 through Triton on Hopper: intermediate 1440 -> 1472; values
    padded to 64 bytes a side, scales swizzled (rows to 256) plus the loaded uint8 copy,
    float32 biases."""
    w13 = 1472 * 2944  # (hidden / 2 = 1440 -> 1472) x (2 x 1472)
    w2 = 2880 * 768  # hidden x (1472 / 2 = 736 -> 768)
    swizzled = 3072 * 90 + 3072 * 46  # (2944 -> 3072) x 2880/32, (2880 -> 3072) x 1472/32
    loaded = 2944 * 90 + 2880 * 46
    bias = (2944 + 2880) * 4
    got = mxfp4_expert_bytes(2880, 1440, "triton", bias=True, act=2)
    assert got == w13 + w2 + swizzled + loaded + bias


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "version", "logged", "planned"),
    [
        # llmd-gpt-oss-20b-h100-tp2: vLLM 0.19.0, Triton
        ("openai/gpt-oss-20b", "H100", 2, "0.19.0", 7.01, 6.99),
        # a100-gpt-oss-20b-util0.65: vLLM 0.19.0, Marlin
        ("openai/gpt-oss-20b", "A100-80GB", 1, "0.19.0", 13.72, 13.70),
        # h100-gpt-oss-120b-negative-kv: vLLM 0.10.1, Marlin (its log warns so)
        ("openai/gpt-oss-120b", "H100", 1, "0.10.1", 65.9651, 65.93),
    ],
)
def test_gpt_oss_weights_against_real_startups(
    model: str, gpu: str, tp: int, version: str, logged: float, planned: float
) -> None:
    """'Model loading took' of three real gpt-oss startups, planned from config.json."""
    got = weights_per_gpu(_gpt_oss(model, gpu, tp, version)).total_bytes / GIB
    assert round(got, 2) == planned
    assert got == pytest.approx(logged, rel=0.005)
