"""Tests for vLLM's accounting by release: version parsing, V0/V1, the graph estimate's default."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from servekit.plan import PlanInputs, make_plan
from servekit.plan.engine_rules import (
    ESTIMATE_CUDAGRAPHS_ENV,
    NEWEST,
    NEWEST_KNOWN,
    accounting_for,
    parse_release,
)

Build = Callable[..., PlanInputs]
CORPUS = Path(__file__).parents[2] / "benchmarks" / "corpus" / "real-startups" / "startups.jsonl"


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.19.0", (0, 19, 0)),
        ("v0.26.0", (0, 26, 0)),
        ("0.13.0+faa43dbf.nv26.01", (0, 13, 0)),
        ("0.13.0+faa43dbf.nv26.01 (NVIDIA NGC vLLM container release 26.01)", (0, 13, 0)),
        ("0.9.1.dev705+g01220ce89", (0, 9, 1)),
        ("0.10.1.2.dev0+g1da94e673.d20250903", (0, 10, 1)),
        ("0.10.1.x (inferred from source line numbers)", (0, 10, 1)),
        ("0.25.1rc1", (0, 25, 1)),
        ("1", (1, 0, 0)),
        ("", None),
        (None, None),
        ("main", None),
        ("nightly-0.20", None),
    ],
)
def test_parse_release(text: str | None, release: tuple[int, int, int] | None) -> None:
    """Build and local suffixes are dropped; a dev build counts as the release it leads to."""
    assert parse_release(text) == release


@pytest.mark.parametrize(
    ("version", "env", "estimate"),
    [
        ("0.13.0", {}, False),
        ("0.17.1", {ESTIMATE_CUDAGRAPHS_ENV: "1"}, False),  # no such variable before 0.18.0
        ("0.18.0", {}, False),
        ("0.18.0", {ESTIMATE_CUDAGRAPHS_ENV: "1"}, True),
        ("0.19.1", {}, False),
        ("0.20.0", {}, True),  # envs.py default "1" from v0.20.0
        ("0.20.0", {ESTIMATE_CUDAGRAPHS_ENV: "0"}, False),
        ("0.26.0", {}, True),
        ("0.32.0", {}, True),
        ("0.8.5", {"VLLM_USE_V1": "0", ESTIMATE_CUDAGRAPHS_ENV: "1"}, False),  # V0: never
    ],
)
def test_graph_estimate_by_release(version: str, env: dict[str, str], estimate: bool) -> None:
    """The CUDA-graph estimate exists from 0.18.0, defaults on from 0.20.0, never in V0."""
    assert accounting_for(version, env).estimate_cudagraphs(env) is estimate


def test_engine_selection() -> None:
    """VLLM_USE_V1=0 picks V0 up to 0.10.x; V1 is the default from 0.8.0; V0 is gone in 0.11."""
    assert accounting_for("0.8.5", {}).engine == "v1"
    assert accounting_for("0.8.5", {"VLLM_USE_V1": "0"}).engine == "v0"
    assert accounting_for("0.10.1", {"VLLM_USE_V1": "0"}).engine == "v0"
    assert accounting_for("0.7.3", {}).engine == "v0"
    assert accounting_for("0.7.3", {"VLLM_USE_V1": "1"}).engine == "v1"
    unversioned = accounting_for(None, {"VLLM_USE_V1": "0"})
    assert (unversioned.engine, unversioned.release) == ("v0", (0, 10, 1))
    assert unversioned.assumption is not None
    assert "V0" in unversioned.assumption
    ignored = accounting_for("0.11.0", {"VLLM_USE_V1": "0"})
    assert ignored.engine == "v1"
    assert ignored.assumption is not None
    assert "V0 removed" in ignored.assumption


def test_measurement_rules_by_release() -> None:
    """How non-KV memory is measured and where NCCL's buffers land follow each release's worker."""
    assert accounting_for("0.9.0", {}).non_kv == "device_used"
    assert accounting_for("0.9.1", {}).non_kv == "increase_since_init"
    assert accounting_for("0.26.0", {}).non_kv == "increase_since_init"
    assert accounting_for("0.27.0", {}).non_kv == "free_delta"
    assert accounting_for("0.10.1", {}).distributed_init_in_budget is True
    assert accounting_for("0.11.0", {}).distributed_init_in_budget is False
    kernels = [
        accounting_for(v, {}).sampler_kernel for v in ("0.11.0", "0.13.0", "0.19.0", "0.25.1")
    ]
    assert kernels == ["flashinfer", "sort", "triton", "flashinfer"]
    v0 = accounting_for("0.8.5", {"VLLM_USE_V1": "0"})
    assert (v0.profile_compiled, v0.weights_include_draft, v0.concurrency_whole_blocks) == (
        False,
        False,
        False,
    )
    assert "rest of the memory reserved for KV Cache" in v0.kv_budget_line


def test_missing_or_unknown_version_is_newest_with_assumption() -> None:
    """No version, or one that is not a release number, plans as the newest release, said so."""
    for version in (None, "", "latest"):
        rules = accounting_for(version, {})
        assert rules.release == NEWEST_KNOWN
        assert rules.assumption is not None
        assert "newest release checked" in rules.assumption
    newer = accounting_for("0.99.0", {})
    assert newer.release == (0, 99, 0)
    assert newer.non_kv == NEWEST.non_kv
    assert newer.assumption is not None
    assert "assumed unchanged" in newer.assumption
    assert accounting_for("0.19.0", {}).assumption is None
    assert NEWEST.assumption is None


def test_every_rule_names_its_release_and_source() -> None:
    """Each applied rule cites a vLLM release tag and a file in vLLM's tree."""
    for rules in (accounting_for("0.32.0", {}), accounting_for("0.8.5", {"VLLM_USE_V1": "0"})):
        assert rules.sources
        for source in rules.sources:
            assert re.match(r"v0\.\d+\.\d+ [\w/]+\.py", source), source


def _corpus() -> list[dict[str, object]]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def test_corpus_versions_choose_rules() -> None:
    """Every corpus entry's version and env choose rules; the engine's DEBUG dumps agree."""
    for entry in _corpus():
        version = entry["vllm_version"]
        env = {k: v for k, v in dict(entry["env"]).items() if k.startswith("VLLM_USE_V1")}  # type: ignore[call-overload]
        rules = accounting_for(version if isinstance(version, str) else None, env)
        dumped = dict(entry["env"]).get(ESTIMATE_CUDAGRAPHS_ENV)  # type: ignore[call-overload]
        if isinstance(dumped, str):  # "False (value in the engine's DEBUG env dump ...)"
            assert rules.estimate_cudagraphs({}) is dumped.startswith("True"), entry["id"]
        if env.get("VLLM_USE_V1") == "0":
            assert rules.engine == "v0", entry["id"]


def test_plan_states_the_version_assumption(inputs_for: Build) -> None:
    """A profile without an engine version plans as the newest release and warns about it."""
    plan = make_plan(inputs_for("llama-3.1-70b-4xh100", "engine.version="))
    assert plan.inputs.accounting.release == NEWEST_KNOWN
    assert any("vLLM version not given" in w for w in plan.warnings)


def test_v0_plan(inputs_for: Build) -> None:
    """V0: graphs outside the budget, concurrency as tokens over length, NCCL in the budget."""
    v1 = make_plan(inputs_for("llama-3.1-70b-4xh100", "engine.version=0.10.1"))
    v0 = make_plan(
        inputs_for(
            "llama-3.1-70b-4xh100",
            "engine.version=0.8.5",
            "env.VLLM_USE_V1=0",
            f"env.{ESTIMATE_CUDAGRAPHS_ENV}=1",
        )
    )
    assert v0.inputs.accounting.engine == "v0"
    assert v0.inputs.estimate_cudagraphs is False
    assert v0.kv_cache_bytes == pytest.approx(v0.kv_cache_bytes_estimate_off)
    assert v0.max_concurrency == pytest.approx(v0.kv_cache_tokens / v0.inputs.max_model_len)
    assert any("NCCL communicators" in w for w in v0.warnings)
    assert any("has no effect on this engine" in w for w in v0.warnings)
    # the budgets differ only by the profiled activation peak (V1's sampler kernel and
    # persistent workspaces, docs/memory-model.md section 4)
    peak_gap = v0.activations.peak_bytes - v1.activations.peak_bytes
    assert v1.kv_cache_bytes - v0.kv_cache_bytes == pytest.approx(peak_gap)


def test_profiles_keep_their_accounting(inputs_for: Build) -> None:
    """The built-in 0.25/0.26 profiles choose the same graph-estimate setting as before."""
    assert inputs_for("minimax-m3-mxfp8-8xa800").estimate_cudagraphs is False  # env "0"
    assert inputs_for("minimax-m3-mxfp8-8xa800-v0251-patched").estimate_cudagraphs is False
    for name in ("llama-3.1-70b-4xh100", "deepseek-v3-8xh200"):
        assert inputs_for(name).estimate_cudagraphs is True
        assert not any(
            "vLLM" in w and "not planned" in w for w in make_plan(inputs_for(name)).warnings
        )


def test_v0_draft_weights_outside_the_budget(inputs_for: Build) -> None:
    """V0 profiles the scorer alone: the draft's weights do not reduce its KV budget."""
    v1 = make_plan(inputs_for("minimax-m3-mxfp8-8xa800", "engine.version=0.10.1"))
    v0 = make_plan(
        inputs_for("minimax-m3-mxfp8-8xa800", "engine.version=0.10.1", "env.VLLM_USE_V1=0")
    )
    assert v1.weights.draft_bytes > 0
    # plus the activation peaks' difference (V1's cuBLAS workspace and sampler kernel)
    peak_gap = v1.activations.peak_bytes - v0.activations.peak_bytes
    gap = v0.kv_cache_bytes - v1.kv_cache_bytes
    assert gap == pytest.approx(v1.weights.draft_bytes + peak_gap)
    assert any("outside vLLM's KV budget" in w for w in v0.warnings)


def test_enforce_eager_profiles_eager() -> None:
    """V1 profiles through torch.compile unless enforce_eager; V0 always eager."""
    assert NEWEST.profiles_compiled(enforce_eager=False) is True
    assert NEWEST.profiles_compiled(enforce_eager=True) is False
    v0 = accounting_for("0.8.5", {"VLLM_USE_V1": "0"})
    assert v0.profiles_compiled(enforce_eager=False) is False
