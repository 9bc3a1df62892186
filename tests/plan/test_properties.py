"""Invariants of the memory planner, checked with Hypothesis over many configurations."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from servekit.hardware import lookup_gpu
from servekit.plan import PlanInputs, make_plan, plan_inputs
from servekit.plan.kv_cache import kv_bytes_per_token
from servekit.plan.weights import weights_per_gpu
from servekit.profiles import load_profile

PROFILES = ["minimax-m3-mxfp8-8xa800", "llama-3.1-70b-4xh100", "deepseek-v3-8xh200"]
BASE = {
    name: plan_inputs(p, lookup_gpu(p.hardware.gpu))
    for name in PROFILES
    for p in [load_profile(name)]
}

configs = st.builds(
    lambda name, util, seqs, tokens, length: dataclasses.replace(
        BASE[name],
        gpu_memory_utilization=util,
        max_num_seqs=seqs,
        max_num_batched_tokens=max(tokens, seqs),
        max_model_len=length,
    ),
    st.sampled_from(PROFILES),
    st.floats(min_value=0.5, max_value=0.99),
    st.integers(min_value=1, max_value=512),
    st.integers(min_value=256, max_value=16384),
    st.integers(min_value=1024, max_value=262144),
)


@settings(max_examples=60, deadline=None)
@given(configs, st.floats(min_value=0.001, max_value=0.3))
def test_more_utilization_never_less_kv(inputs: PlanInputs, extra: float) -> None:
    """Raising gpu_memory_utilization never shrinks the KV cache or its token capacity."""
    higher = dataclasses.replace(
        inputs, gpu_memory_utilization=min(1.0, inputs.gpu_memory_utilization + extra)
    )
    low, high = make_plan(inputs), make_plan(higher)
    assert high.kv_cache_bytes >= low.kv_cache_bytes
    assert high.kv_cache_tokens >= low.kv_cache_tokens


@settings(max_examples=60, deadline=None)
@given(configs)
def test_budget_adds_up(inputs: PlanInputs) -> None:
    """requested = weights + activation peak + non-torch + KV (+ graphs when budgeted)."""
    plan = make_plan(inputs)
    graphs = plan.graphs.total_bytes if inputs.estimate_cudagraphs else 0.0
    total = (
        plan.weights.total_bytes
        + plan.activations.peak_bytes
        + plan.non_torch_bytes
        + plan.kv_cache_bytes
        + graphs
    )
    assert abs(total - plan.requested_bytes) < 1.0


@settings(max_examples=60, deadline=None)
@given(configs)
def test_fit_means_one_full_request(inputs: PlanInputs) -> None:
    """A plan fits exactly when the cache holds one max_model_len request; capacity is blocks."""
    plan = make_plan(inputs)
    assert plan.fits == (plan.kv_cache_tokens >= inputs.max_model_len)
    assert plan.kv_cache_tokens % inputs.block_size == 0
    if not plan.fits and plan.largest_fitting_max_model_len is not None:
        assert plan.largest_fitting_max_model_len < inputs.max_model_len


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]))
def test_more_tensor_parallel_never_more_per_gpu(tp: int) -> None:
    """Doubling TP never raises weights or KV bytes per token per GPU."""
    base = BASE["llama-3.1-70b-4xh100"]
    one = dataclasses.replace(base, tensor_parallel_size=tp)
    two = dataclasses.replace(base, tensor_parallel_size=tp * 2)
    assert weights_per_gpu(two).total_bytes <= weights_per_gpu(one).total_bytes
    assert kv_bytes_per_token(two) <= kv_bytes_per_token(one)
