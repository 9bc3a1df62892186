"""Tests for the assembled per-GPU plan, its JSON contract, warnings and misfit search."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from servekit.errors import ConfigError
from servekit.plan import PlanInputs, make_plan, plan_to_json
from servekit.plan.cuda_graphs import capture_sizes, graph_plan
from servekit.units import GIB

Build = Callable[..., PlanInputs]


def test_json_contract_keys(inputs_for: Build) -> None:
    """plan --json carries every key docs/schemas/README.md promises."""
    doc = plan_to_json(make_plan(inputs_for("minimax-m3-mxfp8-8xa800"))).as_json()
    assert set(doc["per_gpu"]) == {  # type: ignore[arg-type]
        "capacity_gib",
        "requested_gib",
        "weights_gib",
        "activation_peak_gib",
        "non_torch_gib",
        "cuda_graphs_gib",
        "kv_cache_gib",
    }
    for key in ("kv_bytes_per_token", "kv_cache_tokens", "max_concurrency_at_max_model_len"):
        assert key in doc
    assert doc["fits"] is True
    assert isinstance(doc["warnings"], list)


def test_m3_worked_example(inputs_for: Build) -> None:
    """The M3-on-A800 worked example of docs/memory-model.md, term by term."""
    plan = make_plan(inputs_for("minimax-m3-mxfp8-8xa800"))
    assert plan.capacity_bytes / GIB == pytest.approx(79.150, abs=0.001)
    assert plan.requested_bytes / GIB == pytest.approx(78.359, abs=0.001)
    assert plan.weights.total_bytes / GIB == pytest.approx(54.229, abs=0.001)
    assert plan.activations.mm_encoder_bytes / GIB == pytest.approx(9.898, abs=0.001)
    assert plan.activations.sampler_bytes / GIB == pytest.approx(2.221, abs=0.001)
    assert plan.activations.workspace_bytes / GIB == pytest.approx(0.008, abs=0.001)
    assert plan.graphs.total_bytes / GIB == pytest.approx(2.882, abs=0.001)
    assert plan.kv_cache_bytes / GIB == pytest.approx(13.973, abs=0.001)
    assert plan.kv_bytes_per_token == 45_824
    assert plan.kv_cache_tokens == 327_296
    assert plan.max_concurrency == pytest.approx(2557 / 1024)


def test_m3_against_deployment_figures(inputs_for: Build) -> None:
    """Weights within 10% of 58.5 GiB and CUDA graphs within 30% of 4.1 GiB (seed.json)."""
    plan = make_plan(inputs_for("minimax-m3-mxfp8-8xa800"))
    assert plan.weights.total_bytes / GIB == pytest.approx(58.5, rel=0.10)
    assert plan.graphs.total_bytes / GIB == pytest.approx(4.1, rel=0.30)


def test_graph_estimate_moves_kv(inputs_for: Build) -> None:
    """With the CUDA-graph estimate on, the KV cache shrinks by exactly the graph memory."""
    off = make_plan(inputs_for("minimax-m3-mxfp8-8xa800"))
    on = make_plan(
        inputs_for("minimax-m3-mxfp8-8xa800", "env.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1")
    )
    assert off.kv_cache_bytes - on.kv_cache_bytes == pytest.approx(off.graphs.total_bytes)
    assert on.kv_cache_bytes_estimate_off == pytest.approx(off.kv_cache_bytes)


def test_estimate_default_follows_engine_version(inputs_for: Build) -> None:
    """Without the env flag the estimate is on from vLLM 0.20.0 (envs.py default 1) and off before.

    vLLM's own log line says "default since v0.21.0", but v0.20.0's envs.py already defaults
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS to 1 (v0.19.1: 0).
    """
    assert inputs_for("llama-3.1-70b-4xh100").estimate_cudagraphs is True
    assert inputs_for("llama-3.1-70b-4xh100", "engine.version=0.20.2").estimate_cudagraphs
    old = inputs_for("llama-3.1-70b-4xh100", "engine.version=0.19.1")
    assert old.estimate_cudagraphs is False


def test_capture_sizes(inputs_for: Build) -> None:
    """Default capture sizes: 51 up to 512; with k=3, multiples of 4 (49); FULL up to seqs*(1+k)."""
    llama = inputs_for("llama-3.1-70b-4xh100")
    assert len(capture_sizes(llama)) == 51
    assert len(graph_plan(llama).full_sizes) == 35
    m3 = inputs_for("minimax-m3-mxfp8-8xa800")
    sizes = capture_sizes(m3)
    assert len(sizes) == 49
    assert all(s % 4 == 0 for s in sizes)
    assert max(sizes) == 512
    assert graph_plan(inputs_for("llama-3.1-70b-4xh100", "enforce_eager=true")).total_bytes == 0


def test_m3_warnings(inputs_for: Build) -> None:
    """M3 warns: graphs outside the budget, Marlin weight-only FP8, multimodal profiling."""
    warnings = " ".join(make_plan(inputs_for("minimax-m3-mxfp8-8xa800")).warnings)
    assert "outside the KV budget" in warnings
    assert "weight-only through Marlin" in warnings
    assert "--set language_model_only=true" in warnings
    assert "max_num_seqs 128 is far above" in warnings


def test_language_model_only_frees_profiling_memory(inputs_for: Build) -> None:
    """--language-model-only removes the multimodal profiling term from the peak."""
    with_mm = make_plan(inputs_for("minimax-m3-mxfp8-8xa800"))
    text = make_plan(inputs_for("minimax-m3-mxfp8-8xa800", "language_model_only=true"))
    assert text.activations.mm_encoder_bytes == 0
    assert text.kv_cache_bytes > with_mm.kv_cache_bytes


def test_misfit_finds_largest_fitting_length(inputs_for: Build) -> None:
    """A context that does not fit yields the largest max_model_len that does, exactly."""
    inputs = inputs_for("llama-3.1-70b-4xh100", "max_model_len=1048576")
    plan = make_plan(inputs)
    assert not plan.fits
    best = plan.largest_fitting_max_model_len
    assert best is not None
    assert best % inputs.block_size == 0
    assert make_plan(dataclasses.replace(inputs, max_model_len=best)).fits
    bigger = dataclasses.replace(inputs, max_model_len=best + inputs.block_size)
    assert not make_plan(bigger).fits
    assert f"lower it with --set max_model_len={best}" in plan.warnings[-1]


def test_nothing_fits_says_so(inputs_for: Build) -> None:
    """When weights alone exceed the budget there is no fitting length and the fix says so."""
    plan = make_plan(
        inputs_for("llama-3.1-70b-4xh100", "tensor_parallel_size=1", "hardware.gpus_per_node=1")
    )
    assert not plan.fits
    assert plan.largest_fitting_max_model_len is None
    assert "use more GPUs" in plan.warnings[-1]


def test_tp_must_divide_heads(inputs_for: Build) -> None:
    """A TP size that does not divide the attention heads is a clear error."""
    with pytest.raises(ConfigError, match="tensor_parallel_size 3 does not divide the 64"):
        inputs_for("llama-3.1-70b-4xh100", "tensor_parallel_size=3", "hardware.gpus_per_node=3")


def test_m3_block_size_must_be_128(inputs_for: Build) -> None:
    """MiniMax-M3's sparse attention requires block size 128."""
    with pytest.raises(ConfigError, match="block_size 16 does not work"):
        inputs_for("minimax-m3-mxfp8-8xa800", "block_size=16")


def test_m3_encoder_live_set(inputs_for: Build) -> None:
    """M3 profiling peak: 131,072 x 4 patches x (1176 pixels + projector live set) x 2 B."""
    plan = make_plan(inputs_for("minimax-m3-mxfp8-8xa800"))
    patches = 131_072 * 4
    assert plan.activations.mm_encoder_bytes == patches * (1176 + 1280 + 2 * 6144 / 8 + 6144) * 2
    replicated = make_plan(inputs_for("minimax-m3-mxfp8-8xa800", "mm_encoder_tp_mode=data"))
    assert replicated.activations.mm_encoder_bytes == patches * (1176 + 1280 + 3 * 6144) * 2


def test_m3_activation_matches_deployment_remainder(inputs_for: Build) -> None:
    """Planned activation + non-torch is within 10% of what the deployment's figures leave.

    requested - logged weights - logged KV = 78.36 - 58.5 - 10.2 = 9.66 GiB.
    """
    plan = make_plan(inputs_for("minimax-m3-mxfp8-8xa800"))
    remainder = plan.requested_bytes / GIB - 58.5 - 10.2
    planned = (plan.activations.peak_bytes + plan.non_torch_bytes) / GIB
    assert planned == pytest.approx(remainder, rel=0.10)
