"""Known answers for weights per GPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servekit.plan import PlanInputs
from servekit.plan.quantization import lookup_scheme
from servekit.plan.weights import weights_per_gpu
from servekit.units import GIB

Build = Callable[..., PlanInputs]


def test_llama_70b_bf16_tp4(inputs_for: Build) -> None:
    """Llama-3.1-70B bf16 at TP4 holds 32.9 GiB per GPU (70.55B params x 2 B / 4) within 2%."""
    total = weights_per_gpu(inputs_for("llama-3.1-70b-4xh100")).total_bytes / GIB
    assert total == pytest.approx(32.9, rel=0.02)
    assert total == pytest.approx(70_553_706_496 * 2 / 4 / GIB, rel=0.002)


def test_m3_weights_near_deployment(inputs_for: Build) -> None:
    """M3-MXFP8 at TP8 on A800 plans within 10% of the 58.5 GiB the deployment logged."""
    w = weights_per_gpu(inputs_for("minimax-m3-mxfp8-8xa800"))
    assert w.total_bytes / GIB == pytest.approx(58.5, rel=0.10)
    assert w.experts_bytes > 0.9 * (w.total_bytes - w.draft_bytes)
    assert w.draft_bytes / GIB == pytest.approx(3.3e9 * 2 / 8 / GIB)


def test_mxfp8_bytes_per_param() -> None:
    """MXFP8 stores 1 + 1/32 bytes per value; on sm80 Marlin keeps 16-bit scales (1 + 2/32)."""
    scheme = lookup_scheme("mxfp8")
    assert scheme.bytes_per_param(gpu_has_fp8=True) == 1 + 1 / 32
    assert scheme.bytes_per_param(gpu_has_fp8=False) == 1 + 2 / 32
    assert scheme.runs_weight_only(gpu_has_fp8=False)


def test_expert_parallel_matches_tp_when_divisible(inputs_for: Build) -> None:
    """Whole experts per rank (EP) hold the same bytes as split experts (TP) when E % tp == 0."""
    tp = weights_per_gpu(inputs_for("deepseek-v3-8xh200")).experts_bytes
    ep = weights_per_gpu(inputs_for("deepseek-v3-8xh200", "enable_expert_parallel=true"))
    assert ep.experts_bytes == pytest.approx(tp)


def test_pipeline_parallel_splits_layers(inputs_for: Build) -> None:
    """Two pipeline stages hold half the layers and one of embedding/LM head."""
    one = weights_per_gpu(inputs_for("llama-3.1-70b-4xh100"))
    two = weights_per_gpu(
        inputs_for("llama-3.1-70b-4xh100", "pipeline_parallel_size=2", "hardware.gpus_per_node=8")
    )
    assert two.dense_mlp_bytes == pytest.approx(one.dense_mlp_bytes / 2)
    assert two.embeddings_bytes == pytest.approx(one.embeddings_bytes / 2)
