"""`servekit profiles new` then `servekit plan` from a bare config.json, for every model family
issue #15 names: the profile written round-trips through `profiles show` and plans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from servekit.cli.main import cli

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks/corpus/real-startups/configs.jsonl"

# Kimi-K2's published checkpoint: compressed-tensors INT4 (group 32, symmetric) on the routed
# experts; attention, shared experts, dense MLPs and the LM head stay bf16.
KIMI_QUANTIZATION: dict[str, Any] = {
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
        "symmetric": True, "dynamic": False}}},
}  # fmt: skip

GEMMA2_9B: dict[str, Any] = {
    "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "hidden_size": 3584,
    "intermediate_size": 14336, "num_attention_heads": 16, "num_hidden_layers": 42,
    "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096,
    "max_position_embeddings": 8192, "torch_dtype": "float32",
}  # fmt: skip

DEEPSEEK_V3: dict[str, Any] = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    "torch_dtype": "bfloat16",
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "weight_block_size": [128, 128]},
}  # fmt: skip

QWEN15_MOE: dict[str, Any] = {
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
    "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
    "num_experts_per_tok": 4, "decoder_sparse_step": 1, "num_attention_heads": 16,
    "num_hidden_layers": 24, "num_key_value_heads": 16, "vocab_size": 151936,
    "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "use_sliding_window": False,
}  # fmt: skip


def _corpus(model: str) -> dict[str, Any]:
    for line in CONFIGS.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["model"] == model:
            return dict(entry["config"])
    raise AssertionError(f"{model} is not in {CONFIGS}")


# (family, config, GPUs of H200 to plan on)
FAMILIES: list[tuple[str, Any, int]] = [
    ("llama-3.1", lambda: _corpus("meta-llama/Llama-3.1-8B-Instruct"), 1),
    ("llama-4", lambda: _corpus("meta-llama/Llama-4-Scout-17B-16E-Instruct"), 4),
    ("qwen2.5", lambda: _corpus("Qwen/Qwen2.5-7B-Instruct"), 1),
    ("qwen2-moe", lambda: QWEN15_MOE, 1),
    ("qwen3", lambda: _corpus("Qwen/Qwen3-8B"), 1),
    ("qwen3-moe", lambda: _corpus("Qwen/Qwen3-30B-A3B"), 1),
    ("qwen3-moe-fp8", lambda: _corpus("Qwen/Qwen3-30B-A3B-FP8"), 1),
    ("mistral3", lambda: _corpus("mistralai/Mistral-Small-3.1-24B-Instruct-2503"), 1),
    ("mixtral", lambda: _corpus("mistralai/Mixtral-8x7B-Instruct-v0.1"), 2),
    ("gemma2", lambda: GEMMA2_9B, 1),
    ("gemma3", lambda: _corpus("google/gemma-3-27b-it"), 1),
    ("deepseek-v2", lambda: _corpus("deepseek-ai/DeepSeek-V2-Lite-Chat"), 1),
    ("deepseek-v3", lambda: DEEPSEEK_V3, 8),
    ("kimi-k2", lambda: _corpus("moonshotai/Kimi-K2-Thinking")
     | {"quantization_config": KIMI_QUANTIZATION}, 8),
    ("gpt-oss", lambda: _corpus("openai/gpt-oss-20b"), 1),
    ("minimax-m2", lambda: _corpus("MiniMaxAI/MiniMax-M2.7"), 4),
]  # fmt: skip


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(("family", "config", "gpus"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_profiles_new_then_plan_works_for_every_family(
    family: str, config: Any, gpus: int, tmp_path: Path
) -> None:
    """A bare config.json becomes a profile that profiles show prints back unchanged and
    plan plans (it fits, with KV capacity for at least one 8192-token request)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config()), encoding="utf-8")
    out = tmp_path / f"{family}.yaml"
    code, _, err = run(
        "profiles", "new", family, "--model-config", str(path), "--gpu", "h200",
        "--gpus", str(gpus), "--set", "max_model_len=8192", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    written = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert written["model"]["architecture"]["num_layers"] > 0
    assert written["model"]["sources"], "every derived fact names its source"
    code, shown, err = run("profiles", "show", family, "--profiles-dir", str(tmp_path))
    assert code == 0, err
    assert yaml.safe_load(shown) == written
    code, document, err = run("plan", family, "--profiles-dir", str(tmp_path), "--json")
    assert code == 0, err
    plan = json.loads(document)
    assert plan["fits"] is True
    assert plan["kv_cache_tokens"] >= 8192
    assert plan["per_gpu"]["weights_gib"] > 0


def test_unknown_model_type_from_the_real_parser_is_one_line(tmp_path: Path) -> None:
    """A model_type servekit does not read: one line naming it and the keys needed, exit 1 or 2."""
    config = _corpus("meta-llama/Llama-3.1-8B-Instruct") | {"model_type": "brand_new_arch"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    for command in (["profiles", "new", "x"], ["plan"]):
        code, _, err = run(*command, "--model-config", str(path), "--gpu", "h100", "--gpus", "1")
        assert code in {1, 2}, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert "brand_new_arch" in lines[0]
        assert "num_hidden_layers" in lines[0]
