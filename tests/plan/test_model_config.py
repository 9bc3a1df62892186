"""Tests for the config.json parser: each family's facts, quantization, sources and errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from servekit.errors import ConfigError, ModelDirError
from servekit.hardware import lookup_gpu
from servekit.plan.checkpoint import architecture_from_config
from servekit.plan.inputs import PlanInputs, model_spec
from servekit.plan.model_config import ModelFacts, model_facts_from_config
from servekit.plan.quantization import lookup_scheme
from servekit.plan.weights import weights_per_gpu
from servekit.specs import ArchitectureSpec

CORPUS = Path(__file__).parents[2] / "benchmarks" / "corpus" / "real-startups" / "configs.jsonl"
GIB = 1 << 30


def _corpus() -> dict[str, dict[str, Any]]:
    """The corpus entries that carry the checkpoint's own config, by model name."""
    entries = (json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines())
    return {e["model"]: e for e in entries if e.get("config")}


CONFIGS = _corpus()


def real(model: str) -> dict[str, Any]:
    """A real config.json from the corpus (a copy, so tests may edit it)."""
    config: dict[str, Any] = json.loads(json.dumps(CONFIGS[model]["config"]))
    return config


def facts_of(model: str) -> ModelFacts:
    """The parsed facts of a corpus model."""
    return model_facts_from_config(real(model))


def summary(facts: ModelFacts) -> dict[str, Any]:
    """The facts a test compares, as plain values."""
    a = facts.architecture
    local = a.local_attention
    moe = a.moe
    return {
        "model_type": facts.model_type,
        "layers": a.num_layers,
        "heads": (a.num_attention_heads, a.num_kv_heads, a.head_dim),
        "vocab": (a.vocab_size, a.tie_word_embeddings),
        "local": None
        if local is None
        else (local.kind, local.window, local.num_layers, local.num_kv_heads, local.head_dim),
        "moe": None
        if moe is None
        else (
            moe.num_experts,
            moe.top_k,
            moe.expert_intermediate_size,
            moe.num_shared_experts,
            moe.shared_expert_intermediate_size,
            moe.first_dense_layers,
            moe.layer_step,
            a.moe_layers,
        ),
        "mla": None
        if a.mla is None
        else (a.mla.kv_lora_rank, a.mla.q_lora_rank, a.mla.qk_rope_head_dim, a.mla.v_head_dim),
        "sinks": a.attention_sinks,
        "quant": (facts.quantization, facts.quantized_layers),
    }


BF16 = ("bf16", "linear")
EXPECTED: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.1-8B-Instruct": {
        "model_type": "llama", "layers": 32, "heads": (32, 8, 128), "vocab": (128256, False),
        "local": None, "moe": None, "mla": None, "sinks": False, "quant": BF16,
    },
    "Qwen/Qwen2.5-7B-Instruct": {  # sliding_window 131072 stated, use_sliding_window false
        "model_type": "qwen2", "layers": 28, "heads": (28, 4, 128), "vocab": (152064, False),
        "local": None, "moe": None, "mla": None, "sinks": False, "quant": BF16,
    },
    "Qwen/Qwen3-8B": {
        "model_type": "qwen3", "layers": 36, "heads": (32, 8, 128), "vocab": (151936, False),
        "local": None, "moe": None, "mla": None, "sinks": False, "quant": BF16,
    },
    "Qwen/Qwen3-30B-A3B-FP8": {  # modules_to_not_convert: norms and routers only
        "model_type": "qwen3_moe", "layers": 48, "heads": (32, 4, 128),
        "vocab": (151936, False), "local": None,
        "moe": (128, 8, 768, 0, None, 0, 1, 48), "mla": None, "sinks": False,
        "quant": ("fp8_block", "linear"),
    },
    "Qwen/Qwen3-235B-A22B-FP8": {
        "model_type": "qwen3_moe", "layers": 94, "heads": (64, 4, 128),
        "vocab": (151936, False), "local": None,
        "moe": (128, 8, 1536, 0, None, 0, 1, 94), "mla": None, "sinks": False,
        "quant": ("fp8_block", "linear"),
    },
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503": {  # text_config sliding_window null
        "model_type": "mistral", "layers": 40, "heads": (32, 8, 128), "vocab": (131072, False),
        "local": None, "moe": None, "mla": None, "sinks": False, "quant": BF16,
    },
    "mistralai/Mixtral-8x7B-Instruct-v0.1": {
        "model_type": "mixtral", "layers": 32, "heads": (32, 8, 128), "vocab": (32000, False),
        "local": None, "moe": (8, 2, 14336, 0, None, 0, 1, 32), "mla": None, "sinks": False,
        "quant": BF16,
    },
    "google/gemma-3-27b-it": {  # vocab, tie and the 5:1 pattern are Gemma3TextConfig defaults
        "model_type": "gemma3_text", "layers": 62, "heads": (32, 16, 128),
        "vocab": (262208, True), "local": ("sliding_window", 1024, 52, None, None),
        "moe": None, "mla": None, "sinks": False, "quant": BF16,
    },
    "google/gemma-4-26B-A4B": {  # full layers: 2 KV heads of 512; sliding: 8 of 256
        "model_type": "gemma4_text", "layers": 30, "heads": (16, 2, 512),
        "vocab": (262144, True), "local": ("sliding_window", 1024, 25, 8, 256),
        "moe": (128, 8, 704, 1, 2112, 0, 1, 30), "mla": None, "sinks": False, "quant": BF16,
    },
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": {  # a NoPE global layer every 4th
        "model_type": "llama4_text", "layers": 48, "heads": (40, 8, 128),
        "vocab": (202048, False), "local": ("chunked", 8192, 36, None, None),
        "moe": (16, 1, 8192, 1, None, 0, 1, 48), "mla": None, "sinks": False, "quant": BF16,
    },
    "deepseek-ai/DeepSeek-V2-Lite-Chat": {  # q_lora_rank null: a plain q projection
        "model_type": "deepseek_v2", "layers": 27, "heads": (16, 16, 192),
        "vocab": (102400, False), "local": None, "moe": (64, 6, 1408, 2, None, 1, 1, 26),
        "mla": (512, None, 64, 128), "sinks": False, "quant": BF16,
    },
    "moonshotai/Kimi-K2-Thinking": {
        "model_type": "kimi_k2", "layers": 61, "heads": (64, 64, 192),
        "vocab": (163840, False), "local": None, "moe": (384, 8, 2048, 1, None, 1, 1, 60),
        "mla": (512, 1536, 64, 128), "sinks": False, "quant": BF16,
    },
    "openai/gpt-oss-20b": {
        "model_type": "gpt_oss", "layers": 24, "heads": (64, 8, 64), "vocab": (201088, False),
        "local": ("sliding_window", 128, 12, None, None),
        "moe": (32, 4, 2880, 0, None, 0, 1, 24), "mla": None, "sinks": True,
        "quant": ("mxfp4", "experts"),
    },
    "openai/gpt-oss-120b": {
        "model_type": "gpt_oss", "layers": 36, "heads": (64, 8, 64), "vocab": (201088, False),
        "local": ("sliding_window", 128, 18, None, None),
        "moe": (128, 4, 2880, 0, None, 0, 1, 36), "mla": None, "sinks": True,
        "quant": ("mxfp4", "experts"),
    },
    "MiniMaxAI/MiniMax-M2.7": {
        "model_type": "minimax_m2", "layers": 62, "heads": (48, 8, 128),
        "vocab": (200064, False), "local": None, "moe": (256, 8, 1536, 0, None, 0, 1, 62),
        "mla": None, "sinks": False, "quant": ("fp8_block", "linear"),
    },
}  # fmt: skip


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_real_config_gives_exact_facts(model: str) -> None:
    """Each family's real config.json gives its exact layers, heads, windows, MoE, MLA, quant."""
    assert summary(facts_of(model)) == EXPECTED[model]


def test_multimodal_configs_describe_their_vision_encoders() -> None:
    """Pixtral, SigLIP, Llama 4 and Gemma 4 encoders get VisionSpec with counted params."""
    expected = {
        # 24 x (4w^2 + 3wi + 2w) + patch conv + ln_pre; norm + 2x2 merger + 1024->5120->5120
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503": (24, 1024, 4, 438_958_080),
        "google/gemma-3-27b-it": (27, 1152, 16, 423_060_336),
        "meta-llama/Llama-4-Scout-17B-16E-Instruct": (34, 1408, 4, 871_932_416),
        "google/gemma-4-26B-A4B": (27, 1152, 9, 572_794_416),
    }
    for model, (layers, width, per_token, params) in expected.items():
        vision = facts_of(model).architecture.vision
        assert vision is not None, model
        assert (vision.num_layers, vision.hidden_size, vision.patches_per_token) == (
            layers,
            width,
            per_token,
        )
        assert vision.params == params, model


def test_pixtral_params_follow_its_layer_shapes() -> None:
    """The Pixtral count is the sum of its tensors' shapes, written out independently."""
    w, i, h = 1024, 4096, 5120
    encoder = 3 * 14 * 14 * w + w + 24 * (4 * w * w + 3 * w * i + 2 * w)
    projector = w + 4 * w * w + w * h + h * h
    vision = facts_of("mistralai/Mistral-Small-3.1-24B-Instruct-2503").architecture.vision
    assert vision is not None
    assert vision.params == encoder + projector


def total_params(arch: ArchitectureSpec) -> float:
    """Parameters the planner's weights code counts at TP1 in bf16 (the RoPE table, a
    buffer and not a parameter, left out)."""
    inputs = PlanInputs(
        model=model_spec("check", dataclasses.replace(arch, rope_cache=None), "bf16"),
        gpu=lookup_gpu("H100-80GB-SXM"),
        draft=None,
        max_model_len=4096,
    )
    return weights_per_gpu(inputs).total_bytes / 2


@pytest.mark.parametrize(
    "model",
    [
        "meta-llama/Llama-3.1-8B-Instruct",  # 8,030,261,248 (the model card's count)
        "Qwen/Qwen3-14B",
        "Qwen/Qwen3-30B-A3B-Instruct-2507",
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
    ],
)
def test_parsed_facts_count_the_published_parameters(model: str) -> None:
    """Facts from the config give the published parameter count (configs.jsonl weights.params)
    within 0.01% (the planner leaves out q/k norms and biases)."""
    truth = CONFIGS[model]["weights"]["params"]
    assert total_params(facts_of(model).architecture) == pytest.approx(truth, rel=1e-4)


def test_llama_31_8b_parameter_count_is_exact() -> None:
    """Llama-3.1-8B: 8,030,261,248 parameters, exactly."""
    assert total_params(facts_of("meta-llama/Llama-3.1-8B-Instruct").architecture) == 8030261248


def test_rope_tables_follow_the_scaling_vllm_builds() -> None:
    """The cos/sin table: Llama 3 scaling keeps max_position_embeddings rows, YaRN takes
    original x factor (gpt-oss in float32), MLA rotates qk_rope_head_dim values, MiniMax-M2
    its rotary_dim, Llama 4 Scout's 10M positions."""

    def rope(model: str) -> tuple[int, int, str]:
        cache = facts_of(model).architecture.rope_cache
        assert cache is not None
        return cache.positions, cache.rotary_dim, cache.dtype

    assert rope("meta-llama/Llama-3.1-8B-Instruct") == (131072, 128, "model")
    assert rope("openai/gpt-oss-20b") == (4096 * 32, 64, "float32")
    assert rope("deepseek-ai/DeepSeek-V2-Lite-Chat") == (4096 * 40, 64, "model")
    assert rope("MiniMaxAI/MiniMax-M2.7") == (204800, 64, "model")
    assert rope("meta-llama/Llama-4-Scout-17B-16E-Instruct") == (10485760, 128, "model")
    assert rope("google/gemma-3-27b-it")[0] == 131072 * 8  # linear factor 8


def test_mistral_small_weights_need_the_vision_encoder() -> None:
    """Mistral-Small-3.1 logged 44.76 GiB at TP1: within 0.5% with Pixtral, 1.9% short without."""
    arch = facts_of("mistralai/Mistral-Small-3.1-24B-Instruct-2503").architecture
    with_vision = total_params(arch) * 2 / GIB
    assert with_vision == pytest.approx(44.76, rel=5e-3)
    assert arch.vision is not None
    text_only = with_vision - arch.vision.params * 2 / GIB
    assert text_only < 44.76 * 0.985


def test_sources_name_the_keys_of_each_fact() -> None:
    """Sources say which keys each derived fact came from, one line each."""
    sources = facts_of("openai/gpt-oss-20b").sources
    assert "head_dim: head_dim" in sources
    assert (
        "local_attention: every even layer, vLLM gpt_oss.py (12 of 24; layer_types agrees), "
        "window 128 (sliding_window)" in sources
    )
    assert any(s.startswith("quantization: quant_method mxfp4") for s in sources)
    gemma = facts_of("google/gemma-3-27b-it").sources
    assert "head_dim: text_config.head_dim" in gemma
    assert "vocab_size: vocab_size absent, Gemma3TextConfig default 262208" in gemma
    assert all("\n" not in s for s in (*sources, *gemma))


def test_max_position_embeddings_is_reported_with_its_source() -> None:
    """The stated context length comes through (Llama 4 Scout: 10,485,760 in text_config)."""
    facts = facts_of("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert facts.max_position_embeddings == 10485760
    assert "max_position_embeddings: text_config.max_position_embeddings" in facts.sources
    gemma = facts_of("google/gemma-3-27b-it")
    assert gemma.max_position_embeddings == 131072  # Gemma3TextConfig's default
    assert (
        "max_position_embeddings: max_position_embeddings absent, Gemma3TextConfig default 131072"
        in gemma.sources
    )


def test_architecture_from_config_is_the_parsers_architecture() -> None:
    """plan --model-dir's architecture_from_config returns the parser's architecture."""
    config = real("google/gemma-3-27b-it")
    assert architecture_from_config(config) == model_facts_from_config(config).architecture


# --- families from realistic configs (public config.json values) ----------------------------


def test_mistral_7b_sliding_window_makes_every_layer_local() -> None:
    """Mistral-7B-v0.1's sliding_window 4096 windows all 32 layers."""
    config = {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "vocab_size": 32000, "sliding_window": 4096, "torch_dtype": "bfloat16",
    }  # fmt: skip
    local = model_facts_from_config(config).architecture.local_attention
    assert local is not None
    assert (local.kind, local.window, local.num_layers) == ("sliding_window", 4096, 32)


def test_qwen2_sliding_window_on_every_layer_or_refused() -> None:
    """use_sliding_window windows every layer; a window on only some layers is refused."""
    config = real("Qwen/Qwen2.5-7B-Instruct") | {"use_sliding_window": True, "sliding_window": 4096}
    local = model_facts_from_config(config).architecture.local_attention
    assert local is not None
    assert (local.window, local.num_layers) == (4096, 28)
    with pytest.raises(ModelDirError, match="max_window_layers 21 < num_hidden_layers 28"):
        model_facts_from_config(config | {"max_window_layers": 21})
    moe = real("Qwen/Qwen3-30B-A3B-Instruct-2507")  # qwen3_moe.py ignores max_window_layers
    moe |= {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 21}
    local = model_facts_from_config(moe).architecture.local_attention
    assert local is not None
    assert local.num_layers == 48


def test_gemma2_alternates_sliding_and_global_layers() -> None:
    """Gemma-2-9B: 42 layers, every other one sliding (4096), tied embeddings by default."""
    config = {
        "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
        "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
        "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096,
        "torch_dtype": "float32",
    }  # fmt: skip
    facts = model_facts_from_config(config)
    a = facts.architecture
    assert a.local_attention is not None
    assert (a.local_attention.num_layers, a.local_attention.window) == (21, 4096)
    assert (a.tie_word_embeddings, a.dtype, facts.quantization) == (True, "bfloat16", "bf16")
    # the source says what the config states and what is served instead
    assert "dtype: torch_dtype says float32; served as bfloat16 (vLLM's dtype auto on a GPU)" \
        in facts.sources  # fmt: skip


def test_qwen2_moe_shared_expert_and_sparse_step() -> None:
    """Qwen1.5-MoE-A2.7B: 60 experts top-4 with one shared expert of 5632, every layer MoE."""
    config = {
        "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
        "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
        "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16,
        "vocab_size": 151936, "torch_dtype": "bfloat16", "use_sliding_window": False,
    }  # fmt: skip
    moe = model_facts_from_config(config).architecture.moe
    assert moe is not None
    assert (moe.num_experts, moe.top_k, moe.num_shared_experts) == (60, 4, 1)
    assert moe.shared_expert_intermediate_size == 5632
    stepped = model_facts_from_config(config | {"decoder_sparse_step": 2}).architecture
    assert (stepped.moe_layers, stepped.moe and stepped.moe.layer_step) == (12, 2)


def test_llama4_maverick_interleaves_moe_and_reads_no_rope_layers() -> None:
    """interleave_moe_layer_step 2: 24 MoE layers of 48; no_rope_layers sets the chunked ones."""
    text = real("meta-llama/Llama-4-Scout-17B-16E-Instruct")["text_config"]
    rope = [0 if i % 3 == 2 else 1 for i in range(48)]  # 16 NoPE layers
    config = {"model_type": "llama4", "text_config": text | {
        "interleave_moe_layer_step": 2, "num_local_experts": 128, "no_rope_layers": rope,
    }}  # fmt: skip
    a = model_facts_from_config(config).architecture
    assert a.moe is not None
    assert (a.moe.num_experts, a.moe.layer_step, a.moe_layers, a.intermediate_size) == (
        128,
        2,
        24,
        16384,
    )
    assert a.local_attention is not None
    assert (a.local_attention.kind, a.local_attention.num_layers) == ("chunked", 32)


def test_deepseek_v3_fp8_block_checkpoint() -> None:
    """DeepSeek-V3's shipped fp8 block config: 3 dense layers, 58 MoE, fp8_block on linear."""
    config = {
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
        "torch_dtype": "bfloat16",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "weight_block_size": [128, 128]},
    }  # fmt: skip
    facts = model_facts_from_config(config)
    assert (facts.architecture.moe_layers, facts.architecture.first_dense_layers) == (58, 3)
    assert (facts.quantization, facts.quantized_layers) == ("fp8_block", "linear")
    with pytest.raises(ModelDirError, match="moe_layer_freq is 2"):
        model_facts_from_config(config | {"moe_layer_freq": 2})


# --- quantization ---------------------------------------------------------------------------

# RedHatAI/...-FP8-dynamic (llm-compressor): per-channel FP8 weights, dynamic activations
CT_FP8_DYNAMIC: dict[str, Any] = {
    "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
    "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                    "group_size": None, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                              "dynamic": True}}},
}  # fmt: skip


def _ct_int4(group: int, *, symmetric: bool = True, ignore: list[str] | None = None) -> Any:
    """A compressed-tensors W4A16 pack-quantized config."""
    weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": group,
               "symmetric": symmetric, "dynamic": False}  # fmt: skip
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "ignore": ignore or ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }


KIMI_IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]  # fmt: skip

QUANT_CASES: list[tuple[str, Any, str, str, float]] = [
    ("fp8 per-tensor", {"quant_method": "fp8", "activation_scheme": "dynamic"},
     "fp8", "linear", 1.0),
    ("fp8 block", {"quant_method": "fp8", "weight_block_size": [128, 128]},
     "fp8_block", "linear", 1 + 4 / (128 * 128)),
    ("compressed-tensors fp8 dynamic", CT_FP8_DYNAMIC, "fp8", "linear", 1.0),
    ("compressed-tensors w4a16 g128", _ct_int4(128), "int4_sym_g128", "linear", 0.5 + 2 / 128),
    ("compressed-tensors int4 g32, Kimi-K2 experts only", _ct_int4(32, ignore=KIMI_IGNORE),
     "int4_sym_g32", "experts", 0.5 + 2 / 32),
    ("compressed-tensors asymmetric int4", _ct_int4(128, symmetric=False),
     "int4_g128", "linear", 0.5 + 2.5 / 128),
    ("awq", {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
             "version": "gemm"}, "int4_g128", "linear", 0.5 + 2.5 / 128),
    ("gptq sym", {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True,
                  "desc_act": False}, "int4_sym_g128", "linear", 0.5 + 2 / 128),
    ("gptq asym int8", {"quant_method": "gptq", "bits": 8, "group_size": 64, "sym": False},
     "int8_g64", "linear", 1 + 3 / 64),
    ("gptq per-channel", {"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": True},
     "int4", "linear", 0.5),
    ("compressed-tensors targeting experts", {**_ct_int4(64), "config_groups": {"group_0": {
        "targets": ["re:.*mlp.experts.*"], "weights": _ct_int4(64)["config_groups"]["group_0"][
            "weights"]}}}, "int4_sym_g64", "experts", 0.5 + 2 / 64),
    ("auto-round", {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
                    "packing_format": "auto_round:auto_gptq"},
     "int4_sym_g128", "linear", 0.5 + 2 / 128),
    ("mxfp4, gpt-oss", {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"]}, "mxfp4", "experts", 0.5 + 1 / 32),
    ("modelopt nvfp4", {"quant_method": "modelopt", "quant_algo": "NVFP4"},
     "nvfp4", "linear", 0.5 + 1 / 16),
]  # fmt: skip


@pytest.mark.parametrize(
    ("config", "scheme", "layers", "bytes_per_param"),
    [case[1:] for case in QUANT_CASES],
    ids=[case[0] for case in QUANT_CASES],
)
def test_quantization_config_maps_to_scheme_and_bytes(
    config: Any, scheme: str, layers: str, bytes_per_param: float
) -> None:
    """Each quantization_config gives its scheme, the layers it covers and the bytes/param."""
    facts = model_facts_from_config(real("Qwen/Qwen3-8B") | {"quantization_config": config})
    assert (facts.quantization, facts.quantized_layers) == (scheme, layers)
    physical = lookup_scheme(facts.quantization).bytes_per_param(gpu_has_fp8=True)
    assert physical == pytest.approx(bytes_per_param)


def test_no_quantization_config_is_the_dtype() -> None:
    """Without quantization_config the scheme is the checkpoint's dtype."""
    config = real("Qwen/Qwen3-8B") | {"torch_dtype": "float16"}
    assert model_facts_from_config(config).quantization == "fp16"


def test_unmapped_or_mixed_quantization_is_one_line_error() -> None:
    """An unknown quant_method or a mix of schemes is a one-line ModelDirError."""
    base = real("Qwen/Qwen3-8B")
    with pytest.raises(ModelDirError, match="quant_method 'bitsandbytes'") as info:
        model_facts_from_config(base | {"quantization_config": {"quant_method": "bitsandbytes"}})
    assert "\n" not in str(info.value)
    mixed: dict[str, Any] = _ct_int4(128)
    mixed["config_groups"]["group_1"] = CT_FP8_DYNAMIC["config_groups"]["group_0"]
    with pytest.raises(ModelDirError, match="mixes schemes fp8, int4_sym_g128"):
        model_facts_from_config(base | {"quantization_config": mixed})


def test_grouped_int_scheme_names_are_understood() -> None:
    """lookup_scheme builds int<bits>[_sym]_g<N> layouts and still refuses unknown names."""
    assert lookup_scheme("int4_sym_g64").bytes_per_param(gpu_has_fp8=False) == 0.5 + 2 / 64
    assert lookup_scheme("int8_g128").bytes_per_param(gpu_has_fp8=False) == 1 + 3 / 128
    assert lookup_scheme("int4_g128") == lookup_scheme("INT4_G128")
    with pytest.raises(ConfigError, match="unknown quantization 'int3_g128'"):
        lookup_scheme("int3_g128")


# --- errors ---------------------------------------------------------------------------------


def test_unknown_model_type_names_it_the_families_and_the_keys() -> None:
    """An unknown model_type is one line naming it, the known families and the keys needed."""
    with pytest.raises(ModelDirError) as info:
        model_facts_from_config(real("Qwen/Qwen3-8B") | {"model_type": "falcon_h1"})
    text = str(info.value)
    assert "model_type 'falcon_h1' is not a family servekit reads" in text
    assert "gpt_oss" in text
    assert "llama4" in text
    assert "num_key_value_heads" in text
    assert "model.architecture" in text
    assert "\n" not in text


def test_gated_deltanet_hybrid_is_refused_naming_what_it_lacks() -> None:
    """A Qwen3.5 (Gated DeltaNet hybrid) config is refused with the reason and the keys."""
    config = CONFIGS["Qwen3.6-27B AutoRound INT4"]["config"]
    with pytest.raises(ModelDirError, match="'qwen3_5' has Gated DeltaNet") as info:
        model_facts_from_config(config)
    assert "hidden_size" in str(info.value)


def test_missing_field_is_one_line_naming_it() -> None:
    """A config missing a required key names that key and the family, on one line."""
    config = real("google/gemma-3-27b-it")
    del config["text_config"]["num_hidden_layers"]
    with pytest.raises(ModelDirError) as info:
        model_facts_from_config(config)
    assert "model config has no 'num_hidden_layers' (the gemma3_text facts need it)" in str(
        info.value
    )
    assert "\n" not in str(info.value)


def test_bad_layer_types_length_is_refused() -> None:
    """layer_types whose length is not the layer count is an error, not a guess."""
    config = real("openai/gpt-oss-20b")
    config["layer_types"] = config["layer_types"][:-1]
    with pytest.raises(ModelDirError, match="layer_types has 23 entries for 24 layers"):
        model_facts_from_config(config)


def test_gpt_oss_windows_even_layers_as_vllm_does() -> None:
    """vLLM windows gpt-oss's even layers whatever layer_types says; the source says so."""
    config = real("openai/gpt-oss-20b")
    config["layer_types"] = ["full_attention"] * 24
    facts = model_facts_from_config(config)
    local = facts.architecture.local_attention
    assert local is not None
    assert local.num_layers == 12
    assert any("layer_types says 0, which vLLM does not follow" in s for s in facts.sources)
