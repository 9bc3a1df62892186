"""Architecture facts of real models, written out by hand from their published config.json
(benchmarks/corpus/real-startups/configs.jsonl), for planner tests that must not depend on
the config parser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servekit.specs import ArchitectureSpec, LocalAttentionSpec, MoeSpec

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks/corpus/real-startups/configs.jsonl"


def corpus_entry(kind: str, key: str, value: str) -> dict[str, Any]:
    """The record of corpus file `kind` (startups.jsonl, configs.jsonl) whose `key` is `value`."""
    for line in (CONFIGS.parent / kind).read_text(encoding="utf-8").splitlines():
        entry = json.loads(line) if line.strip() else {}
        if entry.get(key) == value:
            return dict(entry)
    raise KeyError(value)


def corpus_config(model: str) -> dict[str, Any]:
    """The published config.json of `model` from the corpus (a fresh copy per call)."""
    for line in CONFIGS.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line) if line.strip() else {}
        if entry.get("model") == model:
            config: dict[str, Any] = entry["config"]
            return config
    raise KeyError(model)


# meta-llama/Llama-3.1-8B-Instruct: 32 layers, GQA 32/8 of 128, no RoPE table stated here.
LLAMA31_8B = ArchitectureSpec(
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=128256,
    intermediate_size=14336,
)
# openai/gpt-oss-20b: 24 layers alternating 128-token sliding window and full attention,
# 8 KV heads of 64, 32 experts with biases (MXFP4 on the routed experts only).
GPT_OSS_20B = ArchitectureSpec(
    num_layers=24,
    hidden_size=2880,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    vocab_size=201088,
    intermediate_size=2880,
    moe=MoeSpec(num_experts=32, top_k=4, expert_intermediate_size=2880, expert_bias=True),
    local_attention=LocalAttentionSpec(kind="sliding_window", window=128, num_layers=12),
    attention_sinks=True,
)
# meta-llama/Llama-4-Scout-17B-16E-Instruct text_config: 48 layers, three of every four
# with 8192-token chunked local attention (the fourth is global, NoPE), 8 KV heads of 128.
LLAMA4_SCOUT = ArchitectureSpec(
    num_layers=48,
    hidden_size=5120,
    num_attention_heads=40,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=202048,
    intermediate_size=16384,
    moe=MoeSpec(
        num_experts=16,
        top_k=1,
        expert_intermediate_size=8192,
        num_shared_experts=1,
    ),
    local_attention=LocalAttentionSpec(kind="chunked", window=8192, num_layers=36),
)
