"""The config.json key reader the family readers share (core): lookup, defaults, sources.

`ConfigKeys` looks a key up in the text backbone's keys (`text_config`), then the top level,
then the family's transformers class default (`config.json` omits keys equal to it), and
records one source line per derived fact. `shown` clips a config value for an error message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servekit.errors import ModelDirError

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


def shown(value: object) -> str:
    """`repr(value)`, clipped to a length an error message can carry."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


class ConfigKeys:
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
                    f"model config key {key!r} is {shown(value)}, not an integer", fix=FIX
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
                f"model config key {key!r} is {shown(value)}, not a list of integers", fix=FIX
            )
        return value, where


# A family reader's facts: the keyword arguments of servekit.specs.ArchitectureSpec.
Facts = dict[str, Any]
