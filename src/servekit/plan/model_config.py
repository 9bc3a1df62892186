"""Model facts from a Hugging Face `config.json` (core): architecture and quantization.

`model_facts_from_config` is the one place a config dict becomes planner facts: the
architecture (`servekit.specs.ArchitectureSpec`), the checkpoint's quantization scheme
and which layers it covers, and where each fact came from. It is pure; reading files
is `servekit.plan.checkpoint`'s job.

It dispatches on `model_type` (the text backbone's, `text_config.model_type`, for a
multimodal config). `config.json` omits keys equal to the config class's default (the
nested `text_config` of Gemma 3 has no `vocab_size`), so each family knows its class's
defaults (transformers `configuration_<family>.py`) for the keys it reads, and says so
in the fact's source. How vLLM builds each family's layers is in the readers' comments
(vllm/model_executor/models/<family>.py, vLLM 0.32 unless named).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from servekit.errors import ModelDirError
from servekit.plan.quantization import SCHEMES, grouped_int_scheme
from servekit.specs import ArchitectureSpec, QuantizedLayers


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What a model's config says the planner needs.

    Attributes:
        model_type: the config's `model_type` (the text backbone's for multimodal configs).
        architecture: the validated architecture facts.
        quantization: the quantization scheme name (`servekit.plan.quantization.SCHEMES`).
        quantized_layers: which linear layers the scheme covers.
        sources: one line per derived fact: which config key(s) it came from.
        max_position_embeddings: the context length the config states, if it does (vLLM's
            default max_model_len, and the rows of its RoPE cos/sin cache).
    """

    model_type: str
    architecture: ArchitectureSpec
    quantization: str = "bf16"
    quantized_layers: QuantizedLayers = "linear"
    sources: tuple[str, ...] = field(default=())
    max_position_embeddings: int | None = None


FIX = "correct config.json or state model.architecture in the profile"
# The config.json keys a profile's model.architecture is written from, for a model whose
# family servekit does not read (named in the unknown-model_type error).
NEEDED_KEYS = (
    "num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, head_dim, "
    "vocab_size, intermediate_size (and the MoE, MLA and sliding-window keys if it has them)"
)
_MAX_SHOWN = 80  # characters of a value from the config shown in an error

# Class defaults (transformers 5.x configuration_<family>.py) of the keys the readers use,
# for configs that omit them. Only the keys whose absence is normal are listed.
_DEFAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", {"tie_word_embeddings": False}),
    "llama4_text": (
        "Llama4TextConfig",
        {
            "vocab_size": 202048,
            "head_dim": 128,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "num_local_experts": 16,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 1,
            "no_rope_layer_interval": 4,
            "attention_chunk_size": 8192,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
        },
    ),
    "mistral": (
        "MistralConfig",
        {
            "vocab_size": 32000,
            "sliding_window": 4096,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
        },
    ),
    "mixtral": ("MixtralConfig", {"sliding_window": None, "tie_word_embeddings": False}),
    "qwen2": ("Qwen2Config", {"use_sliding_window": False, "max_window_layers": 28}),
    "qwen3": (
        "Qwen3Config",
        {"use_sliding_window": False, "max_window_layers": 28, "head_dim": 128},
    ),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        {"use_sliding_window": False, "max_window_layers": 28, "decoder_sparse_step": 1},
    ),
    "qwen3_moe": ("Qwen3MoeConfig", {"use_sliding_window": False, "decoder_sparse_step": 1}),
    "gemma2": (
        "Gemma2Config",
        {
            "vocab_size": 256000,
            "head_dim": 256,
            "sliding_window": 4096,
            "tie_word_embeddings": True,
        },
    ),
    "gemma3_text": (
        "Gemma3TextConfig",
        {
            "vocab_size": 262208,
            "head_dim": 256,
            "num_key_value_heads": 4,
            "sliding_window": 4096,
            "sliding_window_pattern": 6,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": True,
        },
    ),
    "gemma4_text": (
        "Gemma4TextConfig",
        {
            "vocab_size": 262144,
            "head_dim": 256,
            "global_head_dim": 512,
            "sliding_window": 512,
            "attention_k_eq_v": False,
            "hidden_size_per_layer_input": 256,
            "num_kv_shared_layers": 0,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": True,
        },
    ),
    "gpt_oss": ("GptOssConfig", {"sliding_window": 128, "tie_word_embeddings": False}),
    "deepseek_v2": ("DeepseekV2Config", {"moe_layer_freq": 1, "first_k_dense_replace": 0}),
    "deepseek_v3": ("DeepseekV3Config", {"moe_layer_freq": 1, "first_k_dense_replace": 3}),
    "kimi_k2": ("DeepseekV3Config", {"moe_layer_freq": 1, "first_k_dense_replace": 3}),
    "minimax_m2": ("MiniMaxM2Config", {"shared_intermediate_size": 0}),
}
# Multimodal wrappers: the text backbone's model_type when text_config does not state it.
_WRAPPERS = {"llama4": "llama4_text", "mistral3": "mistral", "gemma3": "gemma3_text",
             "gemma4": "gemma4_text"}  # fmt: skip
# Families servekit knows and cannot describe, with what it lacks.
_UNDESCRIBABLE = {
    "qwen3_next": "Gated DeltaNet linear-attention layers",
    "qwen3_5": "Gated DeltaNet linear-attention layers",
    "qwen3_5_text": "Gated DeltaNet linear-attention layers",
    "qwen3_5_moe": "Gated DeltaNet linear-attention layers",
    "minimax": "lightning linear-attention layers",
    "minimax_text_01": "lightning linear-attention layers",
    "minimax_m3": "an indexed sparse attention whose facts config.json does not spell "
    "(state model.architecture.sparse as the MiniMax-M3 profiles do)",
    "deepseek_v32": "a sparse-attention indexer whose cache servekit does not derive",
}


def _shown(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."


class _Keys:
    """A config's keys: the text backbone's first, then the top level, then the family's
    class defaults; records one source line per fact."""

    def __init__(self, config: Mapping[str, Any], family: str) -> None:
        text = config.get("text_config")
        self.text: Mapping[str, Any] = text if isinstance(text, Mapping) else {}
        self.top = config
        self.family = family
        self._class, self._defaults = _DEFAULTS.get(family, ("", {}))
        self.sources: list[str] = []

    def find(self, key: str) -> tuple[Any, str]:
        """The value of `key` and where it came from; (None, "") when nowhere."""
        prefix = "text_config." if self.text else ""
        for layer, where in ((self.text, f"{prefix}{key}"), (self.top, key)):
            if layer.get(key) is not None:
                return layer[key], where
        for layer, where in ((self.text, f"{prefix}{key}"), (self.top, key)):
            if key in layer:  # stated as null: the class default does not apply
                return None, f"{where} null"
        if key in self._defaults:
            value = self._defaults[key]
            return value, f"{key} absent, {self._class} default {value!r}"
        return None, ""

    def note(self, line: str) -> None:
        self.sources.append(line)

    def opt(self, *keys: str, fact: str | None = None) -> int | None:
        """The first of `keys` the config states, as an integer (None when none is)."""
        for key in keys:
            value, where = self.find(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise ModelDirError(
                    f"model config key {key!r} is {_shown(value)}, not an integer", fix=FIX
                )
            if fact:
                self.note(f"{fact}: {where}")
            return value
        return None

    def req(self, *keys: str, fact: str | None = None) -> int:
        """Like `opt`, but a config stating none of `keys` is an error naming them."""
        value = self.opt(*keys, fact=fact)
        if value is None:
            names = " or ".join(repr(k) for k in keys)
            needed = f" (the {self.family} facts need it)" if self.family != "generic" else ""
            raise ModelDirError(
                f"model config has no {names}{needed}",
                fix="add it to config.json or state model.architecture in the profile",
            )
        return value

    def flag(self, key: str, default: bool) -> tuple[bool, str]:
        value, where = self.find(key)
        if value is None:
            return default, where or f"{key} absent, {default}"
        return bool(value), where

    def int_list(self, key: str) -> tuple[list[int] | None, str]:
        value, where = self.find(key)
        if value is None:
            return None, where
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise ModelDirError(
                f"model config key {key!r} is {_shown(value)}, not a list of integers", fix=FIX
            )
        return value, where


Facts = dict[str, Any]


def _base(k: _Keys) -> Facts:
    """Layers, widths, heads, vocabulary, tied embeddings and dtype: every family's."""
    hidden = k.req("hidden_size", fact="hidden_size")
    heads = k.req("num_attention_heads", fact="num_attention_heads")
    facts: Facts = {
        "attention": "full",
        "num_layers": k.req("num_hidden_layers", fact="num_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
    }
    kv = k.opt("num_key_value_heads", fact="num_kv_heads")
    if kv is None:
        kv = heads
        k.note("num_kv_heads: num_key_value_heads absent, = num_attention_heads")
    facts["num_kv_heads"] = kv
    head_dim = k.opt("head_dim", fact="head_dim")
    if head_dim is None:
        head_dim = hidden // heads if heads > 0 else 0
        k.note("head_dim: hidden_size / num_attention_heads")
    facts["head_dim"] = head_dim
    facts["vocab_size"] = k.req("vocab_size", fact="vocab_size")
    tie, where = k.flag("tie_word_embeddings", False)
    facts["tie_word_embeddings"] = tie
    k.note(f"tie_word_embeddings: {where}")
    dtype, where = k.find("torch_dtype")
    if dtype is None:
        dtype, where = k.find("dtype")
    if dtype is not None:
        facts["dtype"] = _serving_dtype(str(dtype))
        k.note(f"dtype: {where}")
    else:
        k.note("dtype: torch_dtype absent, bfloat16 (vLLM's --dtype auto)")
    return facts


def _serving_dtype(name: str) -> str:
    dtype = name.removeprefix("torch.")
    # vLLM's --dtype auto serves float32 checkpoints in bfloat16 on GPUs that have it.
    return "bfloat16" if dtype == "float32" else dtype


def _dense(k: _Keys, facts: Facts, key: str = "intermediate_size") -> None:
    facts["intermediate_size"] = k.req(key, fact="intermediate_size")


def _layer_types(k: _Keys, num_layers: int, allowed: frozenset[str]) -> tuple[list[str], str]:
    value, where = k.find("layer_types")
    if value is None:
        return [], ""
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ModelDirError(f"model config layer_types is {_shown(value)}, not a list", fix=FIX)
    if len(value) != num_layers:
        raise ModelDirError(
            f"model config layer_types has {len(value)} entries for {num_layers} layers", fix=FIX
        )
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ModelDirError(
            f"model_type {k.family!r} config has layer_types {', '.join(unknown)}, which "
            "servekit cannot describe",
            fix=f"state model.architecture in the profile by hand from {NEEDED_KEYS}",
        )
    return value, where


def _sliding(k: _Keys, facts: Facts, sliding: int, how: str, **extra: int) -> None:
    """Record `sliding` sliding-window layers of `sliding_window` tokens."""
    if sliding == 0:
        k.note(f"local_attention: none ({how})")
        return
    window = k.req("sliding_window")
    _, where = k.find("sliding_window")
    facts["local_attention"] = {
        "kind": "sliding_window",
        "window": window,
        "num_layers": sliding,
        **extra,
    }
    k.note(f"local_attention: {how}, window {window} ({where})")


def _typed_or_uniform_sliding(k: _Keys, facts: Facts) -> None:
    # vLLM's llama.py (Llama, Mistral, Mixtral's attention): layer_types gives each layer's
    # window; without it every layer takes the model's sliding_window (cache_config).
    layers = facts["num_layers"]
    types, where = _layer_types(k, layers, frozenset({"sliding_attention", "full_attention"}))
    if types:
        n = types.count("sliding_attention")
        _sliding(k, facts, n, f"{where} ({n} sliding_attention of {layers})")
        return
    window, where = k.find("sliding_window")
    if window is None:
        k.note(f"local_attention: none ({where or 'no sliding_window'})")
        return
    _sliding(k, facts, layers, f"every layer ({where})")


def _qwen_sliding(k: _Keys, facts: Facts, *, per_layer: bool) -> None:
    # transformers drops sliding_window unless use_sliding_window, and vLLM then windows
    # every layer (cache_config.sliding_window). Qwen2/Qwen3 (per_layer) build layer_types
    # sliding from max_window_layers on, and vLLM's qwen2.py refuses a window on only some
    # layers; qwen2_moe.py / qwen3_moe.py ignore max_window_layers.
    use, where = k.flag("use_sliding_window", False)
    if not use:
        k.note(f"local_attention: none ({where} false)")
        return
    layers = facts["num_layers"]
    first = k.opt("max_window_layers") if per_layer else None
    if first is not None and 0 < first < layers:
        raise ModelDirError(
            f"model config slides the window on layers {first}..{layers - 1} only "
            f"(max_window_layers {first} < num_hidden_layers {layers}), which vLLM does not serve",
            fix="set use_sliding_window false or max_window_layers 0 in config.json",
        )
    _sliding(k, facts, layers, f"every layer ({where} true)")


def _moe(
    k: _Keys,
    facts: Facts,
    *,
    experts: tuple[str, ...],
    top_k: tuple[str, ...],
    expert_size: tuple[str, ...],
    shared: int = 0,
    shared_size: int | None = None,
    first_dense: int = 0,
    step: int = 1,
) -> None:
    facts["moe"] = {
        "num_experts": k.req(*experts, fact="moe.num_experts"),
        "top_k": k.req(*top_k, fact="moe.top_k"),
        "expert_intermediate_size": k.req(*expert_size, fact="moe.expert_intermediate_size"),
        "num_shared_experts": shared,
        "shared_expert_intermediate_size": shared_size,
        "first_dense_layers": first_dense,
        "layer_step": step,
    }


def _llama(k: _Keys) -> Facts:
    facts = _base(k)
    _dense(k, facts)
    _typed_or_uniform_sliding(k, facts)
    return facts


def _mistral(k: _Keys) -> Facts:
    return _llama(k)


def _mixtral(k: _Keys) -> Facts:
    facts = _llama(k)
    _moe(
        k,
        facts,
        experts=("num_local_experts",),
        top_k=("num_experts_per_tok",),
        expert_size=("intermediate_size",),
    )
    return facts


def _llama4(k: _Keys) -> Facts:
    facts = _base(k)
    # vLLM llama4.py: layer i is MoE when (i + 1) % interleave_moe_layer_step == 0, else a
    # dense MLP of intermediate_size_mlp; the MoE has one shared expert of the experts'
    # intermediate_size. (transformers' moe_layers list is not read by vLLM.)
    _dense(k, facts, "intermediate_size_mlp")
    step = k.req("interleave_moe_layer_step", fact="moe.layer_step")
    if step < 1:
        raise ModelDirError(
            f"model config interleave_moe_layer_step is {step}: a Llama 4 without MoE layers",
            fix=FIX,
        )
    _moe(
        k,
        facts,
        experts=("num_local_experts",),
        top_k=("num_experts_per_tok",),
        expert_size=("intermediate_size",),
        shared=1,
        step=step,
    )
    k.note("moe.num_shared_experts: 1 (Llama 4's shared_expert, vLLM llama4.py)")
    # Layers with RoPE use chunked local attention of attention_chunk_size; the NoPE layers
    # are global. no_rope_layers (1 = RoPE) when stated, else transformers' default of a
    # NoPE layer every no_rope_layer_interval-th layer, which vLLM reads from the config.
    layers = facts["num_layers"]
    rope_flags, where = k.int_list("no_rope_layers")
    if rope_flags:
        if len(rope_flags) < layers:
            raise ModelDirError(
                f"model config no_rope_layers has {len(rope_flags)} entries for {layers} layers",
                fix=FIX,
            )
        rope = sum(1 for flag in rope_flags[:layers] if flag)
        how = f"{where} ({rope} RoPE layers of {layers})"
    else:
        interval = k.req("no_rope_layer_interval")
        _, iwhere = k.find("no_rope_layer_interval")
        rope = sum(1 for i in range(layers) if (i + 1) % interval != 0)
        how = f"every layer but each {interval}th ({iwhere}; no_rope_layers absent)"
    chunk, cwhere = k.find("attention_chunk_size")
    if chunk is None or rope == 0:
        k.note(f"local_attention: none ({cwhere or 'no attention_chunk_size'})")
        return facts
    window = k.req("attention_chunk_size")
    facts["local_attention"] = {"kind": "chunked", "window": window, "num_layers": rope}
    k.note(f"local_attention: chunked on the RoPE layers, {how}, chunk {window} ({cwhere})")
    return facts


def _qwen(k: _Keys) -> Facts:
    facts = _base(k)
    _dense(k, facts)
    _qwen_sliding(k, facts, per_layer=True)
    return facts


def _qwen_moe(k: _Keys) -> Facts:
    facts = _base(k)
    _dense(k, facts)
    _qwen_sliding(k, facts, per_layer=False)
    # vLLM qwen2_moe.py / qwen3_moe.py: a layer is MoE unless listed in mlp_only_layers,
    # when its 1-based index is a multiple of decoder_sparse_step.
    dense_only, _ = k.int_list("mlp_only_layers")
    if dense_only:
        raise ModelDirError(
            f"model config lists mlp_only_layers {_shown(dense_only)}, a dense-layer pattern "
            "servekit cannot describe",
            fix="state model.architecture.moe in the profile by hand",
        )
    step = k.req("decoder_sparse_step", fact="moe.layer_step")
    shared_size = k.opt("shared_expert_intermediate_size", fact="moe.shared_expert_size")
    _moe(
        k,
        facts,
        experts=("num_experts",),
        top_k=("num_experts_per_tok",),
        expert_size=("moe_intermediate_size",),
        shared=1 if shared_size else 0,
        shared_size=shared_size or None,
        step=step,
    )
    return facts


def _gemma(k: _Keys, pattern_key: str | None, pattern: int) -> Facts:
    facts = _base(k)
    _dense(k, facts)
    # vLLM gemma2.py / gemma3.py window each layer by layer_types; transformers builds it,
    # when absent, as sliding unless (i + 1) % pattern == 0.
    layers = facts["num_layers"]
    types, where = _layer_types(k, layers, frozenset({"sliding_attention", "full_attention"}))
    if types:
        n = types.count("sliding_attention")
        how = f"{where} ({n} sliding_attention of {layers})"
    else:
        pwhere = f"every {pattern}th layer full (layer_types absent)"
        if pattern_key is not None:
            pattern = k.req(pattern_key)
            pwhere = f"every {pattern}th layer full ({k.find(pattern_key)[1]})"
        n = sum(1 for i in range(layers) if (i + 1) % pattern)
        how = f"{n} of {layers} layers, {pwhere}"
    _sliding(k, facts, n, how)
    return facts


def _gemma2(k: _Keys) -> Facts:
    return _gemma(k, None, 2)


def _gemma3(k: _Keys) -> Facts:
    return _gemma(k, "sliding_window_pattern", 6)


def _gemma4(k: _Keys) -> Facts:
    for key, what in (
        ("hidden_size_per_layer_input", "per-layer input embeddings"),
        ("num_kv_shared_layers", "KV-cache sharing across layers"),
    ):
        if k.opt(key):
            raise ModelDirError(
                f"model config sets {key} ({what}), which servekit cannot describe",
                fix=f"state model.architecture in the profile by hand from {NEEDED_KEYS}",
            )
    facts = _base(k)
    _dense(k, facts)
    layers = facts["num_layers"]
    types, where = _layer_types(k, layers, frozenset({"sliding_attention", "full_attention"}))
    if not types:  # transformers: 5 sliding then 1 full; the last layer always full
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
        where = "layer_types absent, every 6th layer full"
    types[-1] = "full_attention"
    # Full-attention layers use global_head_dim, and num_global_key_value_heads when
    # attention_k_eq_v (their K doubles as V); sliding layers head_dim and
    # num_key_value_heads (transformers Gemma4TextConfig.per_layer_config, vLLM gemma4.py).
    local_heads, local_dim = facts["num_kv_heads"], facts["head_dim"]
    for fact in ("head_dim", "num_kv_heads"):  # what _base read is the sliding layers' fact
        k.sources = [
            f"local_attention.{line}" if line.startswith(f"{fact}: ") else line
            for line in k.sources
        ]
    global_dim = k.req("global_head_dim")
    facts["head_dim"] = global_dim
    k.note(f"head_dim: {k.find('global_head_dim')[1]} (full-attention layers)")
    k_eq_v, kwhere = k.flag("attention_k_eq_v", False)
    global_kv = k.opt("num_global_key_value_heads") if k_eq_v else None
    if global_kv is not None:
        facts["num_kv_heads"] = global_kv
        gwhere = k.find("num_global_key_value_heads")[1]
        k.note(f"num_kv_heads: {gwhere} (full-attention layers; {kwhere} true)")
    else:
        k.note(f"num_kv_heads: num_key_value_heads on every layer ({kwhere} false)")
    n = types.count("sliding_attention")
    bidirectional, _ = k.find("use_bidirectional_attention")
    if bidirectional == "all":
        raise ModelDirError(
            "model config sets use_bidirectional_attention 'all' (a non-causal encoder), "
            "which servekit does not plan",
            fix="serve a causal Gemma 4 checkpoint",
        )
    _sliding(
        k,
        facts,
        n,
        f"{where} ({n} sliding_attention of {layers}), their head_dim {local_dim} and "
        f"{local_heads} KV heads",
        num_kv_heads=local_heads,
        head_dim=local_dim,
    )
    if k.opt("num_experts") is not None:
        # vLLM gemma4.py runs the dense MLP on every layer beside the routed experts: the
        # same weights as one always-active shared expert of intermediate_size.
        _moe(
            k,
            facts,
            experts=("num_experts",),
            top_k=("top_k_experts",),
            expert_size=("moe_intermediate_size", "expert_intermediate_size"),
            shared=1,
            shared_size=facts["intermediate_size"],
        )
        k.note("moe.num_shared_experts: 1, the dense MLP beside the experts (intermediate_size)")
    return facts


def _mla(k: _Keys, facts: Facts) -> None:
    mla = {
        key: k.req(key, fact=f"mla.{key}")
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    }
    facts["attention"] = "mla"
    facts["mla"] = {**mla, "q_lora_rank": k.opt("q_lora_rank", fact="mla.q_lora_rank")}
    facts["head_dim"] = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    k.note("head_dim: qk_nope_head_dim + qk_rope_head_dim (MLA)")


def _deepseek(k: _Keys) -> Facts:
    facts = _base(k)
    _dense(k, facts)
    _mla(k, facts)
    # vLLM deepseek_v2.py: layer i is MoE when i >= first_k_dense_replace and
    # i % moe_layer_freq == 0; the shared experts are one MLP of n_shared_experts x
    # moe_intermediate_size.
    freq = k.req("moe_layer_freq")
    if freq != 1:
        raise ModelDirError(
            f"model config moe_layer_freq is {freq}: MoE on every {freq}th layer from layer 0, "
            "a pattern servekit cannot describe",
            fix="state model.architecture.moe in the profile by hand",
        )
    _moe(
        k,
        facts,
        experts=("n_routed_experts",),
        top_k=("num_experts_per_tok",),
        expert_size=("moe_intermediate_size",),
        shared=k.opt("n_shared_experts", fact="moe.num_shared_experts") or 0,
        first_dense=k.req("first_k_dense_replace", fact="moe.first_dense_layers"),
    )
    return facts


def _gpt_oss(k: _Keys) -> Facts:
    facts = _base(k)
    _dense(k, facts)
    _moe(
        k,
        facts,
        experts=("num_local_experts",),
        top_k=("num_experts_per_tok", "experts_per_token"),
        expert_size=("intermediate_size",),
    )
    # vLLM gpt_oss.py windows the even layers (layer_idx % 2 == 0) whatever layer_types says;
    # the shipped layer_types alternate the same way from a sliding layer 0.
    layers = facts["num_layers"]
    types, where = _layer_types(k, layers, frozenset({"sliding_attention", "full_attention"}))
    n = (layers + 1) // 2
    stated = types.count("sliding_attention") if types else None
    how = f"every even layer, vLLM gpt_oss.py ({n} of {layers}"
    if stated is None:
        how += "; layer_types absent)"
    elif types == ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]:
        how += f"; {where} agrees)"
    else:
        how += f"; {where} says {stated}, which vLLM does not follow)"
    _sliding(k, facts, n, how)
    facts["moe"]["expert_bias"] = True
    k.note("moe.expert_bias: gpt_oss (vLLM gpt_oss.py MLPBlock: FusedMoE(has_bias=True))")
    facts["attention_sinks"] = True
    k.note("attention_sinks: gpt_oss (one learned sink per head, vLLM gpt_oss.py)")
    return facts


def _minimax_m2(k: _Keys) -> Facts:
    types, where = k.int_list("attn_type_list")
    if types and any(t != 1 for t in types):
        raise ModelDirError(
            f"model config {where} has linear-attention layers (0), which servekit cannot describe",
            fix=f"state model.architecture in the profile by hand from {NEEDED_KEYS}",
        )
    facts = _base(k)
    # vLLM minimax_m2.py: every layer is MoE; the experts' width is intermediate_size.
    shared = k.opt("shared_intermediate_size") or 0
    _moe(
        k,
        facts,
        experts=("num_local_experts",),
        top_k=("num_experts_per_tok",),
        expert_size=("intermediate_size",),
        shared=1 if shared else 0,
        shared_size=shared or None,
    )
    facts["intermediate_size"] = facts["moe"]["expert_intermediate_size"]
    k.note("intermediate_size: intermediate_size (no dense layers)")
    return facts


def _generic(k: _Keys) -> Facts:
    """A config without model_type: the standard Hugging Face keys, as read before #15."""
    facts = _base(k)
    if k.opt("kv_lora_rank") is not None:
        _mla(k, facts)
    num_experts = k.opt("n_routed_experts", "num_local_experts", "num_experts")
    if num_experts:
        expert_size = k.req("moe_intermediate_size", "intermediate_size")
        shared_size = k.opt("shared_expert_intermediate_size")
        _moe(
            k,
            facts,
            experts=("n_routed_experts", "num_local_experts", "num_experts"),
            top_k=("num_experts_per_tok", "experts_per_token"),
            expert_size=("moe_intermediate_size", "intermediate_size"),
            shared=k.opt("n_shared_experts") or int(bool(shared_size)),
            shared_size=shared_size,
            first_dense=k.opt("first_k_dense_replace") or 0,
        )
        facts["intermediate_size"] = k.opt("intermediate_size") or expert_size
    else:
        _dense(k, facts)
    return facts


_FAMILIES: dict[str, Callable[[_Keys], Facts]] = {
    "llama": _llama,
    "llama4_text": _llama4,
    "qwen2": _qwen,
    "qwen3": _qwen,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3,
    "gemma4_text": _gemma4,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
    "minimax_m2": _minimax_m2,
}
KNOWN_MODEL_TYPES = tuple(sorted({*_FAMILIES, *_WRAPPERS}))


# --- vision encoders ---------------------------------------------------------------------

# Tiles the Llama 4 image processor cuts at most (transformers Llama4ImageProcessorFast
# max_patches, 16 in Llama-4-Scout/Maverick's preprocessor_config.json); vLLM's dummy image
# uses all of them (mllama4.py get_max_num_tiles).
LLAMA4_MAX_TILES = 16
# Frames of Gemma 4's dummy video and soft tokens per frame (vLLM gemma4_mm.py
# _VIDEO_MAX_FRAMES and _VIDEO_MAX_SOFT_TOKENS, 0.19.0 to 0.32.0).
GEMMA4_VIDEO_FRAMES = 32
GEMMA4_FRAME_TOKENS = 70


def _vision_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    vision = config.get("vision_config")
    return vision if isinstance(vision, Mapping) else {}


def _vision_int(vision: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = vision.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ModelDirError(
            f"model config has no positive integer vision_config.{key}"
            + (f" (got {_shown(value)})" if value is not None else ""),
            fix="add it to config.json or state model.architecture.vision in the profile",
        )
    return value


def _pixtral_vision(config: Mapping[str, Any], text_hidden: int) -> tuple[Facts, str]:
    # vLLM pixtral.py (PixtralHFVisionModel): bias-free patch conv and RMSNorm ln_pre; per
    # layer qkv + o (4w^2), a gated SiLU MLP (3wi) and two RMSNorms. mistral3.py projector:
    # RMSNorm, a patch merger of spatial_merge_size^2 patches (m^2 w x w), linear_1 (w x H)
    # and linear_2 (H x H), biased when multimodal_projector_bias.
    v = _vision_config(config)
    w, i = _vision_int(v, "hidden_size", 1024), _vision_int(v, "intermediate_size", 4096)
    layers = _vision_int(v, "num_hidden_layers", 24)
    patch, channels = _vision_int(v, "patch_size", 16), _vision_int(v, "num_channels", 3)
    merge = _vision_int(config, "spatial_merge_size", 2)
    bias = bool(config.get("multimodal_projector_bias", False))
    values = channels * patch * patch
    encoder = values * w + w + layers * (4 * w * w + 3 * w * i + 2 * w)
    projector = w + merge * merge * w * w + w * text_hidden + text_hidden * text_hidden
    projector += 2 * text_hidden if bias else 0
    # vLLM pixtral.py PixtralHFEncoderInfo: the dummy image is image_size square, one token
    # per merged patch of patch x merge pixels, ((image - 1) // (patch x merge) + 1) a side
    # (the [IMG_BREAK]/[IMG_END] tokens are not embeds, so not counted). Without xformers
    # PixtralHFVisionModel.forward masks attention with transformers'
    # generate_block_attention_mask, one dense patches x patches tensor for the batch.
    side = (_vision_int(v, "image_size", 1024) - 1) // (patch * merge) + 1
    vision = {
        "num_layers": layers,
        "hidden_size": w,
        "intermediate_size": i,
        "patches_per_token": merge * merge,
        "values_per_patch": values,
        "max_tokens_per_item": side * side,
        "dense_block_mask": True,
        "params_override": encoder + projector,
    }
    return vision, (
        f"vision: pixtral vision_config ({layers} layers, width {w}, gated MLP {i}, patch "
        f"{patch}), spatial_merge_size {merge} merger and 2-layer projector to {text_hidden}: "
        f"{encoder + projector} params; largest image {side}x{side} = {side * side} tokens "
        "(vLLM pixtral.py PixtralHFEncoderInfo.get_num_image_tokens)"
    )


def _siglip_vision(config: Mapping[str, Any], text_hidden: int) -> tuple[Facts, str]:
    # vLLM siglip.py: patch conv with bias, a learned position table of (image/patch)^2
    # rows, per layer biased qkv + out (4w^2 + 4w), a biased GELU MLP (2wi + i + w) and two
    # LayerNorms (4w), a post LayerNorm (2w); no pooling head when vision_use_head is false.
    # gemma3_mm.py projector: mm_soft_emb_norm (w) and mm_input_projection_weight (w x H).
    v = _vision_config(config)
    w, i = _vision_int(v, "hidden_size", 768), _vision_int(v, "intermediate_size", 3072)
    layers = _vision_int(v, "num_hidden_layers", 12)
    patch, image = _vision_int(v, "patch_size", 16), _vision_int(v, "image_size", 224)
    channels = _vision_int(v, "num_channels", 3)
    if v.get("vision_use_head"):
        raise ModelDirError(
            "model config sets vision_config.vision_use_head, a SigLIP pooling head servekit "
            "does not count",
            fix="state model.architecture.vision in the profile by hand",
        )
    values = channels * patch * patch
    positions = (image // patch) ** 2
    encoder = values * w + w + positions * w + 2 * w
    encoder += layers * (4 * w * w + 4 * w + 2 * w * i + i + w + 4 * w)
    projector = w + w * text_hidden
    tokens = config.get("mm_tokens_per_image", 256)
    per_token = max(1, positions // tokens) if isinstance(tokens, int) and tokens > 0 else 16
    # vLLM gemma3_mm.py get_num_image_tokens: (crops + 1) x image_seq_length tokens, no crops
    # unless do_pan_and_scan (off by default): the dummy image is one native image of
    # `positions` patches pooled to mm_tokens_per_image tokens.
    per_image = tokens if isinstance(tokens, int) and tokens > 0 else positions // per_token
    vision = {
        "num_layers": layers,
        "hidden_size": w,
        "intermediate_size": i,
        "patches_per_token": per_token,
        "values_per_patch": values,
        "max_tokens_per_item": per_image,
        "patches_per_item": positions,
        "params_override": encoder + projector,
    }
    return vision, (
        f"vision: siglip vision_config ({layers} layers, width {w}, MLP {i}, {positions} "
        f"patches of {patch}), projection to {text_hidden}: {encoder + projector} params; "
        f"{per_image} tokens per image (mm_tokens_per_image; vLLM gemma3_mm.py, no "
        "pan-and-scan crops by default)"
    )


def _llama4_vision(config: Mapping[str, Any], text_hidden: int) -> tuple[Facts, str]:
    # vLLM mllama4.py: a bias-free unfold patch linear, class embedding and (patches + 1)
    # position rows, pre/post LayerNorms; per layer biased qkv + o (4w^2 + 4w), a biased GELU
    # MLP (2wi + i + w) and two LayerNorms (4w). The pixel-shuffle adapter MLP takes
    # intermediate_size -> projector_input_dim -> projector_output_dim (bias when
    # multi_modal_projector_bias), then linear_1 vision_output_dim -> text hidden.
    v = _vision_config(config)
    w, i = _vision_int(v, "hidden_size", 768), _vision_int(v, "intermediate_size", 5632)
    layers = _vision_int(v, "num_hidden_layers", 34)
    patch, image = _vision_int(v, "patch_size", 14), _vision_int(v, "image_size", 448)
    channels = _vision_int(v, "num_channels", 3)
    p_in, p_out = (
        _vision_int(v, "projector_input_dim", 4096),
        _vision_int(v, "projector_output_dim", 4096),
    )
    out_dim = _vision_int(v, "vision_output_dim", 7680)
    ratio = v.get("pixel_shuffle_ratio", 0.5)
    if not isinstance(ratio, int | float) or isinstance(ratio, bool) or not 0 < ratio <= 1:
        raise ModelDirError(
            f"model config vision_config.pixel_shuffle_ratio is {_shown(ratio)}", fix=FIX
        )
    values = channels * patch * patch
    positions = (image // patch) ** 2 + 1
    encoder = values * w + w + positions * w + 4 * w
    encoder += layers * (4 * w * w + 4 * w + 2 * w * i + i + w + 4 * w)
    adapter = i * p_in + p_in * p_out
    adapter += p_in + p_out if v.get("multi_modal_projector_bias") else 0
    projector = out_dim * text_hidden
    # vLLM mllama4.py: the dummy image is max_patches chunks tall (h:w = 16:1), so the
    # processor cuts LLAMA4_MAX_TILES tiles and adds the global thumbnail; each chunk is
    # (image/patch)^2 // ds_ratio tokens (get_patch_per_chunk) and runs (image/patch)^2 + 1
    # patches (the class token) through the encoder.
    ds_ratio = round(1 / (ratio * ratio))
    chunks = LLAMA4_MAX_TILES + 1
    per_chunk = (image // patch) ** 2 // ds_ratio
    vision = {
        "num_layers": layers,
        "hidden_size": w,
        "intermediate_size": i,
        "patches_per_token": ds_ratio,
        "values_per_patch": values,
        "max_tokens_per_item": chunks * per_chunk,
        "patches_per_item": chunks * positions,
        "params_override": encoder + adapter + projector,
    }
    return vision, (
        f"vision: llama4 vision_config ({layers} layers, width {w}, MLP {i}), pixel-shuffle "
        f"adapter {i}->{p_in}->{p_out} and projector to {text_hidden}: "
        f"{encoder + adapter + projector} params; largest image {chunks} chunks x "
        f"{per_chunk} tokens (vLLM mllama4.py get_image_size_with_most_features, "
        f"max_patches {LLAMA4_MAX_TILES} tiles + the global one)"
    )


def _gemma4_vision(config: Mapping[str, Any], text_hidden: int) -> tuple[Facts, str]:
    # vLLM gemma4_mm.py runs transformers' Gemma4VisionModel (modeling_gemma4.py): a
    # bias-free patch linear and a 2 x position_embedding_size x w position table; per layer
    # q/k/v/o (heads and KV heads of head_dim), q/k RMSNorms, a gated MLP (3wi) and four
    # RMSNorms; std_bias/std_scale buffers when standardize. Gemma4MultimodalEmbedder
    # projects w -> text hidden (a weightless norm, no bias). Pooling merges k^2 patches.
    v = _vision_config(config)
    w, i = _vision_int(v, "hidden_size"), _vision_int(v, "intermediate_size")
    layers = _vision_int(v, "num_hidden_layers")
    heads = _vision_int(v, "num_attention_heads")
    kv = _vision_int(v, "num_key_value_heads", heads)
    head_dim = _vision_int(v, "head_dim", w // heads)
    patch, table = _vision_int(v, "patch_size"), _vision_int(v, "position_embedding_size")
    pool = _vision_int(v, "pooling_kernel_size", 3)
    if v.get("use_clipped_linears"):
        raise ModelDirError(
            "model config sets vision_config.use_clipped_linears, clip buffers servekit does "
            "not count",
            fix="state model.architecture.vision in the profile by hand",
        )
    values = 3 * patch * patch
    attention = 2 * w * heads * head_dim + 2 * w * kv * head_dim
    encoder = values * w + 2 * table * w + (2 * w if v.get("standardize") else 0)
    encoder += layers * (attention + 2 * head_dim + 3 * w * i + 4 * w)
    projector = w * text_hidden
    # vLLM gemma4_mm.py get_mm_max_tokens_per_item: an image is default_output_length soft
    # tokens, a video GEMMA4_VIDEO_FRAMES x (GEMMA4_FRAME_TOKENS + boi, eoi and 6 timestamp
    # tokens); vLLM profiles the larger (the video). Each frame is padded to
    # GEMMA4_FRAME_TOKENS x pool^2 patches (the image processor's max_patches).
    image_tokens = _vision_int(v, "default_output_length", 280)
    video_tokens = GEMMA4_VIDEO_FRAMES * (GEMMA4_FRAME_TOKENS + 8)
    if video_tokens >= image_tokens:
        item, patches = video_tokens, GEMMA4_VIDEO_FRAMES * GEMMA4_FRAME_TOKENS * pool * pool
        what = f"a {GEMMA4_VIDEO_FRAMES}-frame video"
    else:
        item, patches, what = image_tokens, image_tokens * pool * pool, "an image"
    vision = {
        "num_layers": layers,
        "hidden_size": w,
        "intermediate_size": i,
        "patches_per_token": pool * pool,
        "values_per_patch": values,
        "max_tokens_per_item": item,
        "patches_per_item": patches,
        "params_override": encoder + projector,
    }
    return vision, (
        f"vision: gemma4 vision_config ({layers} layers, width {w}, gated MLP {i}, position "
        f"table {table}), projection to {text_hidden}: {encoder + projector} params; "
        f"profiled with {what}, {item} tokens, {patches} patches (vLLM gemma4_mm.py "
        "get_mm_max_tokens_per_item)"
    )


_VISION: dict[str, Callable[[Mapping[str, Any], int], tuple[Facts, str]]] = {
    "mistral3": _pixtral_vision,
    "gemma3": _siglip_vision,
    "llama4": _llama4_vision,
    "gemma4": _gemma4_vision,
}


# --- quantization ------------------------------------------------------------------------

# Module names of attention blocks in Hugging Face checkpoints (a whole name component,
# so `post_attention_layernorm` is not one).
_ATTENTION_NAMES = frozenset({"self_attn", "attn", "attention", "self_attention"})
_NAME_PARTS = re.compile(r"[^A-Za-z0-9_]+")


def _covers_attention(names: object) -> bool:
    """True when a list of module names / patterns left unquantized includes attention."""
    if not isinstance(names, list):
        return False
    return any(
        isinstance(n, str) and not _ATTENTION_NAMES.isdisjoint(_NAME_PARTS.split(n)) for n in names
    )


def _quant_error(what: str) -> ModelDirError:
    return ModelDirError(
        f"model config quantization_config {what}",
        fix="set model.quantization in the profile to one of: " + ", ".join(SCHEMES),
    )


def _quant_int(qc: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = qc.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is None:
        raise _quant_error(f"has no {' or '.join(repr(k) for k in keys)}")
    return default


def _int_scheme(bits: int, group: int, *, zero_point: bool, method: str) -> str:
    if bits not in (4, 8):
        raise _quant_error(f"has {method} bits {bits}; servekit knows 4 and 8")
    if group in (-1, 0):  # one scale per output channel: negligible
        return "int4" if bits == 4 else "int8"
    if group < 0:
        raise _quant_error(f"has {method} group_size {group}")
    return grouped_int_scheme(bits, group, zero_point=zero_point).name


def _fp8_block(block: object, where: str) -> str:
    if block is None:
        return "fp8"
    if block != [128, 128]:
        raise _quant_error(f"has {where} {_shown(block)}; servekit knows [128, 128] blocks")
    return "fp8_block"


def _compressed_tensors(qc: Mapping[str, Any]) -> tuple[str, str]:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise _quant_error("(compressed-tensors) has no config_groups")
    schemes = set()
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            raise _quant_error("(compressed-tensors) has a config group without weights")
        bits = _quant_int(weights, "num_bits")
        kind = weights.get("type")
        strategy = weights.get("strategy")
        size = weights.get("group_size")
        if kind == "float" and bits == 8:
            block = weights.get("block_structure") if strategy == "block" else None
            schemes.add(_fp8_block(block, "block_structure"))
        elif kind == "float" and bits == 4:
            # NVFP4 scales every 16 values with FP8, MXFP4 every 32 with E8M0.
            fp4 = {16: "nvfp4", 32: "mxfp4"}.get(size if isinstance(size, int) else 0)
            if fp4 is None:
                raise _quant_error(f"has FP4 group_size {_shown(size)}; servekit knows 16, 32")
            schemes.add(fp4)
        elif kind == "int":
            group = size if isinstance(size, int) and strategy == "group" else -1
            zero = not weights.get("symmetric", True)
            schemes.add(_int_scheme(bits, group, zero_point=zero, method="compressed-tensors"))
        else:
            raise _quant_error(
                f"(compressed-tensors) has {_shown(kind)} {bits}-bit weights servekit does not map"
            )
    if len(schemes) > 1:
        raise _quant_error(f"(compressed-tensors) mixes schemes {', '.join(sorted(schemes))}")
    scheme = schemes.pop()
    return scheme, f"compressed-tensors config_groups weights -> {scheme}"


def _targets_experts_only(qc: Mapping[str, Any]) -> bool:
    """True when every compressed-tensors group targets expert modules only."""
    groups = qc.get("config_groups")
    targets = [
        t
        for g in (groups.values() if isinstance(groups, Mapping) else ())
        if isinstance(g, Mapping)
        for t in (g.get("targets") or [])
    ]
    return bool(targets) and all(isinstance(t, str) and "expert" in t for t in targets)


def _quantization(config: Mapping[str, Any], dtype: str) -> tuple[str, QuantizedLayers, str]:
    """The scheme, the layers it covers, and a source line, from quantization_config."""
    qc = config.get("quantization_config")
    if qc is None:
        text = config.get("text_config")
        qc = text.get("quantization_config") if isinstance(text, Mapping) else None
    if qc is None:
        scheme = "fp16" if dtype == "float16" else "bf16"
        return scheme, "linear", f"quantization: none (quantization_config absent), {dtype}"
    if not isinstance(qc, Mapping):
        raise _quant_error(f"is {_shown(qc)}, not an object")
    method = str(qc.get("quant_method", "")).lower()
    skipped: object = qc.get("modules_to_not_convert")
    if method == "fp8":
        scheme = _fp8_block(qc.get("weight_block_size"), "weight_block_size")
        how = f"quant_method fp8, weight_block_size {qc.get('weight_block_size')}"
        skipped = skipped or qc.get("ignored_layers")
    elif method == "fbgemm_fp8":  # FP8 weights with one scale per output row
        scheme, how = "fp8", "quant_method fbgemm_fp8"
    elif method == "compressed-tensors":
        scheme, how = _compressed_tensors(qc)
        skipped = qc.get("ignore")
        if _targets_experts_only(qc):
            return scheme, "experts", f"quantization: {how}; targets the experts only"
    elif method == "awq":
        bits = _quant_int(qc, "bits", "w_bit")
        group = _quant_int(qc, "group_size", "q_group_size", default=128)
        zero = qc.get("zero_point", True) is not False
        scheme = _int_scheme(bits, group, zero_point=zero, method="awq")
        how = f"quant_method awq, bits {bits}, group_size {group}, zero_point {zero}"
    elif method in ("gptq", "auto-round"):
        # vLLM serves AutoRound's integer formats (packing_format auto_round:auto_gptq, the
        # default, or auto_round:auto_awq) as GPTQ / AWQ (quantization/inc/inc.py).
        packing = str(qc.get("packing_format", "auto_round:auto_gptq"))
        if method == "auto-round" and (
            packing not in ("auto_round:auto_gptq", "auto_round:auto_awq")
            or qc.get("data_type", "int") != "int"
        ):
            raise _quant_error(
                f"has auto-round packing_format {_shown(packing)} / data_type "
                f"{_shown(qc.get('data_type'))}; servekit maps the integer GPTQ/AWQ formats"
            )
        bits = _quant_int(qc, "bits")
        group = _quant_int(qc, "group_size", default=128)
        # vLLM's GPTQ Marlin keeps qzeros only for sym=false (it drops them on load else);
        # AWQ-packed weights always carry zero points.
        zero = qc.get("sym", True) is False or packing == "auto_round:auto_awq"
        scheme = _int_scheme(bits, group, zero_point=zero, method=method)
        how = f"quant_method {method}, bits {bits}, group_size {group}, zero points {zero}"
    elif method == "mxfp4":
        scheme, how = "mxfp4", "quant_method mxfp4"
    elif method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        scheme = {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo, "")
        if not scheme:
            raise _quant_error(f"has modelopt quant_algo {_shown(algo)}; servekit knows FP8, NVFP4")
        how = f"quant_method modelopt, quant_algo {algo}"
        skipped = qc.get("exclude_modules")
    else:
        raise _quant_error(
            f"has quant_method {_shown(method)}; servekit maps fp8, fbgemm_fp8, "
            "compressed-tensors, awq, gptq, auto-round, mxfp4 and modelopt"
        )
    if _covers_attention(skipped):
        return scheme, "experts", f"quantization: {how}; attention left unquantized -> experts"
    return scheme, "linear", f"quantization: {how}"


# --- entry point -------------------------------------------------------------------------


def _model_type(config: Mapping[str, Any]) -> tuple[str, str]:
    """The text backbone's model_type and the top-level one ("" when absent)."""
    top = config.get("model_type")
    top = top if isinstance(top, str) else ""
    text = config.get("text_config")
    inner = text.get("model_type") if isinstance(text, Mapping) else None
    if isinstance(inner, str) and inner:
        return inner, top
    return _WRAPPERS.get(top, top), top


def model_facts_from_config(
    config: Mapping[str, Any], *, read_quantization: bool = True
) -> ModelFacts:
    """Return the planner facts a Hugging Face `config.json` states.

    A config without `model_type` is read from the standard Hugging Face keys (MLA when
    `kv_lora_rank` is set, MoE from the usual expert-count keys), as `plan --model-dir`
    always has. With `read_quantization` false, `quantization_config` is not read and the
    scheme is the dtype's.

    Raises:
        ModelDirError: a required key is missing, a value is out of range, or the
            `model_type` is not one servekit knows (the message names the keys it needs).
    """
    model_type, top = _model_type(config)
    for name in (top, model_type):
        if name in _UNDESCRIBABLE:
            raise ModelDirError(
                f"model_type {name!r} has {_UNDESCRIBABLE[name]}, which servekit cannot derive "
                "from config.json",
                fix=f"state model.architecture in the profile by hand from {NEEDED_KEYS}",
            )
    family = model_type or "generic"
    reader = _FAMILIES.get(model_type) if model_type else _generic
    if reader is None:
        raise ModelDirError(
            f"model_type {model_type!r} is not a family servekit reads from config.json "
            f"(known: {', '.join(KNOWN_MODEL_TYPES)})",
            fix=f"state model.architecture in the profile by hand from {NEEDED_KEYS}",
        )
    keys = _Keys(config, family)
    facts = reader(keys)
    max_positions = keys.opt("max_position_embeddings", fact="max_position_embeddings")
    if model_type in EMBEDDINGS_ON_EVERY_STAGE:
        facts["embeddings_on_every_stage"] = True
        keys.note(
            f"embeddings_on_every_stage: vLLM's {model_type} model builds embed_tokens and "
            "lm_head on every pipeline stage"
        )
    rope = _rope_cache(keys, facts, model_type, max_positions)
    if rope is not None:
        facts["rope_cache"] = rope
    if not model_type:
        keys.note("model_type: absent, read as a generic decoder (standard Hugging Face keys)")
    vision_reader = _VISION.get(top)
    if vision_reader is not None and _vision_config(config):
        facts["vision"], line = vision_reader(config, facts["hidden_size"])
        keys.note(line)
    elif _vision_config(config):
        keys.note("vision: vision_config not described; its weights are not counted")
    arch = _validated(facts)
    if read_quantization:
        scheme, layers, line = _quantization(config, arch.dtype)
        keys.note(line)
    else:
        scheme, layers = ("fp16" if arch.dtype == "float16" else "bf16"), "linear"
    return ModelFacts(
        model_type=model_type,
        architecture=arch,
        quantization=scheme,
        quantized_layers=layers,
        sources=tuple(keys.sources),
        max_position_embeddings=max_positions,
    )


# RoPE scalings whose cos/sin table is longer than the position count vLLM passes to
# get_rope (vllm/model_executor/layers/rotary_embedding/): linear and dynamic-NTK tables hold
# max_position x factor rows; YaRN and DeepSeek-YaRN tables original_max_position x factor.
_SCALED_BY_FACTOR = frozenset({"linear", "dynamic"})
_YARN = frozenset({"yarn", "deepseek_yarn"})


# Model types whose vLLM model file creates the vocabulary embedding and the LM head on every
# pipeline-parallel stage (no PPMissingLayer for them): vllm/model_executor/models/
# qwen2_moe.py, qwen3_moe.py, mixtral.py, gemma2.py, gemma3.py, gemma4.py, gpt_oss.py
# (0.10 and 0.32 alike). Under PP every stage then holds both tables.
EMBEDDINGS_ON_EVERY_STAGE = frozenset(
    {"qwen2_moe", "qwen3_moe", "mixtral", "gemma2", "gemma3", "gemma3_text", "gemma4",
     "gemma4_text", "gpt_oss"}
)  # fmt: skip


def _rope_parameters(k: _Keys) -> Mapping[str, Any]:
    """The RoPE scaling dict (`rope_scaling`, or transformers 5's `rope_parameters`; for
    per-layer-type parameters, the full-attention layers')."""
    for key in ("rope_scaling", "rope_parameters"):
        value, _ = k.find(key)
        if isinstance(value, Mapping):
            nested = value.get("full_attention")
            return nested if isinstance(nested, Mapping) else value
    return {}


def _rope_cache(k: _Keys, facts: Facts, model_type: str, max_positions: int | None) -> Facts | None:
    """The rotary embedding's cos/sin table (`RopeCacheSpec`) vLLM builds at load.

    vLLM's get_rope makes one `cos_sin_cache` buffer of rows x rotary_dim per distinct
    RoPE configuration, shared by every layer, kept on every GPU: rows are the config's
    max_position_embeddings (default and Llama 3 scaling), times the factor for linear and
    dynamic scaling, original_max_position_embeddings x factor for YaRN. rotary_dim is
    qk_rope_head_dim under MLA, else an explicit `rotary_dim`, else head_dim x
    partial_rotary_factor. gpt-oss builds its table in float32 (vllm/model_executor/models/
    gpt_oss.py), other models in the model dtype. Models with two tables (Gemma's local
    and global RoPE) are counted with the full-attention one only.
    """
    if max_positions is None:
        return None
    rope = _rope_parameters(k)
    kind = str(rope.get("rope_type") or rope.get("type") or "default")
    factor = rope.get("factor")
    scale = float(factor) if isinstance(factor, int | float) and factor > 0 else 1.0
    rows = max_positions
    how = "max_position_embeddings"
    if kind in _SCALED_BY_FACTOR:
        rows, how = int(max_positions * scale), f"max_position_embeddings x {kind} factor {scale:g}"
    elif kind in _YARN:
        original = rope.get("original_max_position_embeddings")
        if isinstance(original, int) and original > 0:
            rows = int(original * scale)
            how = f"original_max_position_embeddings {original} x {kind} factor {scale:g}"
    if facts.get("mla"):
        rotary = int(facts["mla"]["qk_rope_head_dim"])
        dim_how = "qk_rope_head_dim"
    else:
        explicit = k.opt("rotary_dim")
        partial, _ = k.find("partial_rotary_factor")
        if partial is None:
            partial = rope.get("partial_rotary_factor")
        fraction = float(partial) if isinstance(partial, int | float) and 0 < partial <= 1 else 1.0
        rotary = explicit or int(facts["head_dim"] * fraction)
        dim_how = "rotary_dim" if explicit else f"head_dim x partial_rotary_factor {fraction:g}"
    dtype = "float32" if model_type == "gpt_oss" else "model"
    k.note(f"rope_cache: {rows} rows ({how}) x {rotary} values ({dim_how}), {dtype} dtype")
    return {"positions": rows, "rotary_dim": rotary, "dtype": dtype}


def _validated(facts: Facts) -> ArchitectureSpec:
    try:
        return TypeAdapter(ArchitectureSpec).validate_python(facts)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        more = len(exc.errors()) - 1
        raise ModelDirError(
            f"model config gives an invalid {key}: {first['msg']} "
            f"(got {_shown(first.get('input'))})" + (f" (+{more} more)" if more else ""),
            fix=FIX,
        ) from None
