"""The profiled activation peak per vLLM sampler kernel, checked against real startups.

The corpus's vLLM 0.19.0 H100 DEBUG logs (benchmarks/corpus/real-startups/startups.jsonl)
print the peak vLLM measured: "Actual usage is W GiB for weight, P GiB for peak
activation". Those figures are a check, never a fit: every term of the prediction is read
from vLLM's source (src/servekit/plan/activations.py names each one).

Bound: the log rounds to 0.01 GiB (+-0.005), and the terms left out are each far below
that or bounded by it: the dummy sampler's per-row tensors (six metadata rows, argmax and
sampled ids: < 1 MiB at 1,024 rows), the allocator's 512-byte rounding, and TP
communication scratch the planner does not model (the logs differ by 0.01 GiB between TP2
and TP4 of the same 70B model, so +-0.005 around their middle). Together: 0.01 GiB. For
multimodal entries the encoder's cached outputs are planned at their upper bound (the
encoder budget at the text width; the dummy items' exact token count is not modelled), so
their bound adds that term's size.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from known_models import LLAMA31_8B

from servekit.hardware import lookup_gpu
from servekit.plan import PlanInputs
from servekit.plan.activations import (
    activation_peak,
    cublas_workspace_bytes,
    moe_workspace_bytes,
    sampler_bytes_per_logit,
    sampler_tensors,
    sm_count,
    triton_buffer_bytes,
)
from servekit.plan.engine_rules import accounting_for
from servekit.plan.inputs import effective_quantization, model_spec
from servekit.plan.model_config import model_facts_from_config
from servekit.specs import ArchitectureSpec, MoeSpec
from servekit.units import GIB, MIB

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "real-startups"
_PEAK_RE = re.compile(r"Actual usage is [\d.]+ GiB for weight, ([\d.]+) GiB for peak activation")
LOG_ROUNDING_GIB = 0.005
OMITTED_GIB = 0.005


def _configs() -> dict[str, dict[str, Any]]:
    """config.json per model in the corpus (the base model's where only that was found)."""
    out: dict[str, dict[str, Any]] = {}
    for line in (CORPUS / "configs.jsonl").read_text().splitlines():
        entry = json.loads(line)
        config = entry.get("config") or (entry.get("related_config") or {}).get("config")
        if config:
            out[entry["model"]] = config
    return out


def _logged_peaks() -> list[tuple[str, float, PlanInputs]]:
    """(id, logged peak GiB, planner inputs) for every entry whose log prints the peak."""
    configs = _configs()
    rows = []
    for line in (CORPUS / "startups.jsonl").read_text().splitlines():
        entry = json.loads(line)
        found = _PEAK_RE.search("\n".join(entry["log_lines"]))
        if found is None:
            continue
        facts = model_facts_from_config(configs[entry["model"]])
        requested = "fp8" if entry["quantization"] == "fp8" else None
        inputs = PlanInputs(
            model=model_spec(
                entry["id"],
                facts.architecture,
                effective_quantization(facts.quantization, requested),
                facts.quantized_layers,
            ),
            gpu=lookup_gpu("H100"),
            draft=None,
            max_model_len=entry["max_model_len"],
            tensor_parallel_size=entry["tp"],
            pipeline_parallel_size=entry["pp"],
            max_num_seqs=entry["max_num_seqs"],
            max_num_batched_tokens=entry["max_num_batched_tokens"],
            mm_profiling=facts.architecture.vision is not None,
            engine_version=entry["vllm_version"],
            accounting=accounting_for(entry["vllm_version"], {}),
        )
        rows.append((entry["id"], float(found.group(1)), inputs))
    return rows


LOGGED = _logged_peaks()


def _inputs(version: str, **changes: Any) -> PlanInputs:
    """Llama-3.1-8B on one H100 at vLLM `version`, 1,024 sequences, 8,192 tokens."""
    base: dict[str, Any] = {
        "model": model_spec("llama", LLAMA31_8B, "bf16"),
        "gpu": lookup_gpu("H100"),
        "draft": None,
        "max_model_len": 8192,
        "max_num_seqs": 1024,
        "max_num_batched_tokens": 8192,
        "accounting": accounting_for(version, {}),
    }
    base.update(changes)
    return PlanInputs(**base)


@pytest.mark.parametrize(
    ("kernel", "rows", "expected"),
    [
        # bf16 logits 2 + float32 logits 4 + sorted 4 + int64 indices 8 + top-k mask 1
        # + sorted probabilities 4 + top-p mask 1 + the copying scatter's output 4
        ("sort", 1024, 28),
        # bf16 2 + float32 4 (masked in place by the Triton kernel) + probs 4 + noise q 4
        ("triton", 1024, 14),
        # below 8 rows v0.17+ sorts with PyTorch and scatters in place: 28 - 4
        ("triton", 7, 24),
        # bf16 2 + float32 4 + FlashInfer's top-k masked logits 4 + its softmax 4
        ("flashinfer", 1024, 14),
        # v0.8.x: bf16 2 + float32 4 + the probabilities FlashInfer samples from 4
        ("flashinfer_probs", 1024, 10),
    ],
)
def test_bytes_per_logit_per_kernel(kernel: Any, rows: int, expected: int) -> None:
    """Each kernel's live set per logit is the sum of its named tensors, exactly."""
    assert sampler_bytes_per_logit(kernel, rows=rows) == expected
    tensors = sampler_tensors(kernel, rows=rows)
    assert all(t.source for t in tensors)
    assert len({t.name for t in tensors}) == len(tensors)


def test_float32_model_has_no_float32_copy() -> None:
    """A float32 model's logits are not copied: .to(torch.float32) returns them as they are."""
    assert sampler_bytes_per_logit("triton", logits_bytes=4) == 4 + 4 + 4


def test_kernel_and_workspace_by_release() -> None:
    """The sampler kernel and the persistent MoE workspace follow each release's source."""
    kernels = [
        accounting_for(v, {}).sampler_kernel
        for v in ("0.8.5", "0.9.0", "0.11.0", "0.12.0", "0.16.0", "0.17.0", "0.21.0")
    ]
    assert kernels == [
        "flashinfer_probs",
        "flashinfer",
        "flashinfer",
        "sort",
        "sort",
        "triton",
        "flashinfer",
    ]
    persists = [accounting_for(v, {}).moe_workspace_persists for v in ("0.13.0", "0.14.0")]
    assert persists == [False, True]


def test_triton_buffer_is_one_vocab_row_per_sm() -> None:
    """The cached Triton buffer has min(next_pow2(min(SMs, rows)), SMs) float32 vocab rows."""
    h100 = _inputs("0.19.0")
    assert sm_count(h100.gpu) == 132
    assert triton_buffer_bytes(h100, 1024) == 132 * 128256 * 4
    assert triton_buffer_bytes(h100, 100) == 128 * 128256 * 4
    a100 = _inputs("0.19.0", gpu=lookup_gpu("A100-80GB"))
    assert triton_buffer_bytes(a100, 1024) == 108 * 128256 * 4
    assert triton_buffer_bytes(_inputs("0.16.0"), 1024) == 0


def test_sm_count_reads_the_catalog_and_falls_back_to_its_largest() -> None:
    """sm_count is the catalog entry's; a GPU without one takes the catalog's largest (B200)."""
    assert sm_count(lookup_gpu("H20")) == 78
    assert sm_count(lookup_gpu("GH200")) == 132
    unknown = replace(lookup_gpu("H100"), name="H100-PCIE", sm_count=None)
    assert sm_count(unknown) == 148


def test_cublas_workspace_by_compute_capability() -> None:
    """PyTorch's default cuBLAS workspace: 32 MiB on sm90, 8 MiB + 128 KiB elsewhere."""
    assert cublas_workspace_bytes(lookup_gpu("H100")) == 32 * MIB
    assert cublas_workspace_bytes(lookup_gpu("A100-80GB")) == 8 * MIB + 128 * 1024


def test_moe_workspace_only_for_unquantized_experts_from_014() -> None:
    """TritonExperts' persistent workspace: (max(N/2, K, ...) + max(N, K)) x top_k x tokens."""
    moe = ArchitectureSpec(
        num_layers=48,
        hidden_size=2048,
        num_attention_heads=32,
        num_kv_heads=4,
        head_dim=128,
        vocab_size=151936,
        intermediate_size=6144,
        moe=MoeSpec(num_experts=128, top_k=8, expert_intermediate_size=768),
    )
    bf16 = _inputs("0.19.0", model=model_spec("moe", moe, "bf16"))
    assert moe_workspace_bytes(bf16) == 8192 * 8 * (2048 + 2048) * 2
    assert moe_workspace_bytes(_inputs("0.13.0", model=model_spec("moe", moe, "bf16"))) == 0
    assert moe_workspace_bytes(_inputs("0.19.0", model=model_spec("moe", moe, "mxfp4"))) == 0


def test_v0_sampler_unchanged() -> None:
    """V0's sampler (not re-derived) keeps 20 bytes per logit and no persistent workspaces."""
    v0 = _inputs("0.8.5", accounting=accounting_for("0.8.5", {"VLLM_USE_V1": "0"}))
    peak = activation_peak(v0)
    assert peak.sampler_bytes == 1024 * 128256 * 20 + 8192 * 4096 * 2
    assert peak.workspace_bytes == 0


def test_pipeline_stage_buffers_add_to_the_last_stage() -> None:
    """A later PP stage keeps hidden-state and residual buffers through the sampler."""
    tp1 = activation_peak(_inputs("0.19.0"))
    pp2 = activation_peak(_inputs("0.19.0", pipeline_parallel_size=2))
    assert pp2.sampler_bytes - tp1.sampler_bytes == 2 * 8192 * 4096 * 2


def test_corpus_has_the_logged_entries() -> None:
    """Thirteen vLLM 0.19.0 H100 startups print their peak activation."""
    assert len(LOGGED) == 13
    assert {i.accounting.sampler_kernel for _, _, i in LOGGED} == {"triton"}


@pytest.mark.parametrize(("entry", "logged", "inputs"), LOGGED, ids=[e for e, _, _ in LOGGED])
def test_peak_against_the_log(entry: str, logged: float, inputs: PlanInputs) -> None:
    """The planned peak is within the log's rounding plus the terms knowingly omitted."""
    peak = activation_peak(inputs)
    bound = LOG_ROUNDING_GIB + OMITTED_GIB + peak.encoder_cache_bytes / GIB
    assert peak.peak_bytes / GIB == pytest.approx(logged, abs=bound), entry
