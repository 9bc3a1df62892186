"""The GPU catalog against the real-startup corpus: every GPU there is found, by the names
users and vLLM use, with the CUDA total the logs print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.errors import ConfigError
from servekit.hardware import lookup_gpu
from servekit.hardware.catalog import gpu_aliases, normalize_gpu_name

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks/corpus/real-startups/startups.jsonl"
ENTRIES = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
# Corpus entry -> the catalog GPU its log shows (the entry's notes say why for a bare "A100").
EXPECTED = {
    "gb10": "GB10",
    "l4-": "L4",
    "h200x8": "H200-SXM",
    "gh200x8": "GH200",
    "a100-": "A100-80GB-SXM",
    "rtx3090": "RTX-3090",
    "llmd-": "H100-80GB-SXM",
    "h100-": "H100-80GB-SXM",
}


def _expected(entry_id: str) -> str:
    return next(gpu for prefix, gpu in EXPECTED.items() if entry_id.startswith(prefix))


def _printed_name(gpu: str) -> str:
    """The name an entry's `gpu` starts with: 'NVIDIA H200 x8 (...)' -> 'NVIDIA H200'."""
    return gpu.split(" (")[0].removesuffix(" x8").removesuffix(" x2")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_every_corpus_gpu_is_in_the_catalog(entry: dict[str, object]) -> None:
    """Each corpus entry's GPU is in the catalog, found by the name its log or source prints."""
    expected = _expected(str(entry["id"]))
    printed = _printed_name(str(entry["gpu"]))
    if printed == "NVIDIA A100":  # 40 or 80 GB: ambiguous, so an error naming both
        with pytest.raises(ConfigError, match="ambiguous: it names A100-40GB-SXM or A100-80GB-SXM"):
            lookup_gpu(printed)
    else:
        assert lookup_gpu(printed).name == expected
    gpu = lookup_gpu(expected)
    assert gpu.sources
    assert gpu.device_name


@pytest.mark.parametrize(
    "entry", [e for e in ENTRIES if e.get("gpu_mem_gib_reported")], ids=lambda e: e["id"]
)
def test_cuda_total_matches_what_the_log_printed(entry: dict[str, object]) -> None:
    """Where the log prints the total vLLM budgets from, cuda_visible_mib is that figure."""
    gpu = lookup_gpu(_expected(str(entry["id"])))
    assert gpu.cuda_visible_mib / 1024 == pytest.approx(entry["gpu_mem_gib_reported"], abs=0.006)


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("h100", "H100-80GB-SXM"),
        ("a100-40gb", "A100-40GB-SXM"),
        ("a100-80gb", "A100-80GB-SXM"),
        ("l40s", "L40S"),
        ("rtx3090", "RTX-3090"),
        ("rtx-3090", "RTX-3090"),
        ("RTX 3090", "RTX-3090"),
        ("gh200", "GH200"),
        ("gb10", "GB10"),
        ("a10", "A10"),
        ("l4", "L4"),
        ("NVIDIA_GH200_120GB", "GH200"),
        ("NVIDIA_GeForce_RTX_3090", "RTX-3090"),
        ("NVIDIA_GB10", "GB10"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB-SXM"),
        ("nvidia-a100-sxm4-40gb", "A100-40GB-SXM"),
    ],
)
def test_aliases_users_and_vllm_type(typed: str, canonical: str) -> None:
    """Short names, nvidia-smi names and vLLM's device_name strings find the GPU, ignoring
    case and '-', '_' and space differences."""
    assert lookup_gpu(typed).name == canonical


def test_unknown_gpu_is_one_line_with_close_names_and_the_list() -> None:
    """A GPU not in the catalog: one line naming it, the close entries and the list command."""
    with pytest.raises(ConfigError) as caught:
        lookup_gpu("RTX 4090")
    text = str(caught.value)
    assert "\n" not in text
    assert "'RTX 4090'" in text
    assert "RTX-3090" in text
    assert "servekit profiles gpus" in text


def test_gb10_is_unified_memory_budgeted_from_the_cuda_total() -> None:
    """GB10 shares its memory with the CPU: flagged so, with the CUDA total as its memory."""
    gb10 = lookup_gpu("gb10")
    assert gb10.unified_memory
    assert gb10.memory_mib == gb10.cuda_visible_mib
    assert 118 < gb10.cuda_visible_mib / 1024 < 128


def test_every_alias_is_normalized_and_unique() -> None:
    """Every alias key is already normalized, and no key finds two GPUs (checked at load)."""
    keys = [key for names in gpu_aliases().values() for key in names]
    assert keys == [normalize_gpu_name(k) for k in keys]
    assert len(keys) == len(set(keys))
