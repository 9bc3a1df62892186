"""The multimodal encoder's profiling input: the dummy batch vLLM builds, per family."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.cli._fidelity import plan_entry, read_corpus
from servekit.hardware import lookup_gpu
from servekit.plan.activations import (
    mm_dummy_items,
    mm_dummy_tokens,
    mm_encoder_live_bytes,
    mm_encoder_patches,
)
from servekit.plan.engine_rules import accounting_for
from servekit.plan.fidelity import LaunchPlan, launch_plan, predicted_figures, within_bound
from servekit.plan.inputs import PlanInputs, model_spec
from servekit.plan.model_config import model_facts_from_config

CORPUS = Path(__file__).parents[2] / "benchmarks" / "corpus" / "real-startups"
GIB = 1 << 30
GEMMA4 = "google/gemma-4-26B-A4B"
MISTRAL = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
GEMMA3 = "google/gemma-3-27b-it"


def _configs() -> dict[str, dict[str, Any]]:
    """The corpus configs, by model name."""
    lines = (CORPUS / "configs.jsonl").read_text(encoding="utf-8").splitlines()
    entries = (json.loads(line) for line in lines)
    return {e["model"]: e["config"] for e in entries if e.get("config")}


CONFIGS = _configs()


def inputs(
    model: str,
    *,
    version: str = "0.19.0",
    batched: int = 8192,
    model_len: int = 8192,
    seqs: int = 256,
) -> PlanInputs:
    """Planner inputs for a corpus model on one H100 at a vLLM release and serve settings."""
    arch = model_facts_from_config(CONFIGS[model]).architecture
    return PlanInputs(
        model=model_spec(model, arch, "bf16"),
        gpu=lookup_gpu("H100"),
        draft=None,
        max_model_len=model_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        mm_profiling=True,
        accounting=accounting_for(version, {}),
    )


@pytest.mark.parametrize(
    ("model", "tokens", "patches"),
    [
        # pixtral.py: (1540 - 1) // (14 x 2) + 1 = 55 merged patches a side
        (MISTRAL, 55 * 55, 110 * 110),
        # mllama4.py: 16 tiles + the global one, (336/14)^2 // 4 = 144 tokens, 577 patches
        (SCOUT, 17 * 144, 17 * 577),
        # gemma4_mm.py: the video (32 x (70 + 8) tokens) beats the image's 280; 630 patches a frame
        (GEMMA4, 32 * 78, 32 * 70 * 9),
        # gemma3_mm.py: mm_tokens_per_image, no pan-and-scan crops; (896/14)^2 patches
        (GEMMA3, 256, 64 * 64),
    ],
)
def test_largest_dummy_item_per_family(model: str, tokens: int, patches: int) -> None:
    """Each family's config gives vLLM's max tokens per item and the encoder patches of it."""
    vision = model_facts_from_config(CONFIGS[model]).architecture.vision
    assert vision is not None
    per_item = vision.patches_per_item or tokens * vision.patches_per_token
    assert (vision.max_tokens_per_item, per_item) == (tokens, patches)


@pytest.mark.parametrize(
    ("model", "batched", "model_len", "seqs", "items"),
    [
        # the 0.19.0 DEBUG logs print "profiled with 2 (3) image items" for these two
        (MISTRAL, 8192, 8192, 256, 2),  # 8192 // 3025
        (SCOUT, 8192, 8192, 256, 3),  # 8192 // 2448
        (GEMMA4, 2048, 131072, 256, 1),  # the budget is T itself
        (GEMMA4, 8192, 131072, 256, 3),
        (GEMMA3, 8192, 8192, 256, 32),
        # max_num_seqs x max(1, min(999, max_model_len // T)) caps the encoder's 32
        (GEMMA3, 8192, 1024, 2, 8),
    ],
)
def test_dummy_batch_items_follow_the_multimodal_budget(
    model: str, batched: int, model_len: int, seqs: int, items: int
) -> None:
    """Items = max(1, min(max(mnbt, T) // T, max_num_seqs x per-prompt items)), vLLM 0.19."""
    plan = inputs(model, batched=batched, model_len=model_len, seqs=seqs)
    assert mm_dummy_items(plan) == items
    vision = plan.model.vision
    assert vision is not None
    assert vision.max_tokens_per_item is not None
    per_item = vision.patches_per_item or vision.max_tokens_per_item * vision.patches_per_token
    assert mm_encoder_patches(plan) == items * per_item
    assert mm_dummy_tokens(plan) == items * vision.max_tokens_per_item


def test_releases_before_0_10_round_the_items_up() -> None:
    """vLLM 0.9 took ceil(budget / T) items: three 3025-token images for 8192 tokens."""
    assert mm_dummy_items(inputs(MISTRAL, version="0.9.1")) == 3


def test_minimax_m3_video_still_fills_the_context(inputs_for: Callable[..., PlanInputs]) -> None:
    """M3's profile states no item size: one video of max_model_len tokens, as before."""
    plan = inputs_for("minimax-m3-mxfp8-8xa800")
    vision = plan.model.vision
    assert vision is not None
    assert vision.max_tokens_per_item is None
    assert mm_dummy_items(plan) == 1
    assert mm_dummy_tokens(plan) == plan.max_model_len
    assert mm_encoder_patches(plan) == plan.max_model_len * vision.patches_per_token
    assert mm_encoder_live_bytes(plan) / GIB == pytest.approx(9.898, abs=5e-4)


def _launch(entry_id: str) -> LaunchPlan:
    """The fidelity benchmark's launch plan of one corpus entry."""
    corpus = read_corpus(CORPUS)
    (entry,) = (e for e in corpus.startups if e.id == entry_id)
    launch = launch_plan(entry, corpus.configs)
    assert isinstance(launch, LaunchPlan)
    return launch


def test_gemma4_at_131072_tokens_plans_a_kv_budget(tmp_path: Path) -> None:
    """Gemma 4 on A100 at max_model_len 131072 no longer plans its image encoder over 131072
    tokens of patches: the KV budget is positive and within the bound of the logged 21.5 GiB."""
    launch = _launch("a100-gemma4-26b-a4b-eager")
    plan, _ = plan_entry(CliRunner(), launch, tmp_path)
    assert not isinstance(plan, str), plan
    predicted = predicted_figures(plan)["available_kv"]
    assert predicted > 0
    assert within_bound("available_kv", predicted, 21.5)


@pytest.mark.parametrize(
    ("version", "masked"), [("0.11.0", False), ("0.19.0", True), ("0.32.0", False)]
)
def test_pixtral_dense_block_mask_by_release(version: str, masked: bool) -> None:
    """vLLM 0.12-0.28's HF Pixtral encoder holds a dense bf16 mask over the batch's 2 x 12,100
    patches (no xformers); 0.11 (xformers installed) and 0.30+ (attention backend) do not."""
    with_mask = mm_encoder_live_bytes(inputs(MISTRAL, version=version))
    plain = mm_encoder_live_bytes(inputs(MISTRAL, version="0.32.0"))
    assert with_mask - plain == (24200 * 24200 * 2 if masked else 0)
