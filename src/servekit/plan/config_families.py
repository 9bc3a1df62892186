"""Per-family config.json readers (core): one function per `model_type` family.

Each reader turns a config's keys (`servekit.plan.config_keys.ConfigKeys`) into the
architecture facts `servekit.specs.ArchitectureSpec` takes, with a source line per fact.
How vLLM builds each family's layers is in the readers' comments
(vllm/model_executor/models/<family>.py, vLLM 0.32 unless named); the facts every family
shares are read by `plan.config_layers`.
"""

from __future__ import annotations

from collections.abc import Callable

from servekit.errors import ModelDirError
from servekit.plan.config_keys import FIX, NEEDED_KEYS, ConfigKeys, Facts, shown
from servekit.plan.config_layers import (
    base_facts,
    dense_mlp,
    layer_types,
    mla_attention,
    moe_layers,
    sliding_layers,
)


def _typed_or_uniform_sliding(k: ConfigKeys, facts: Facts) -> None:
    # vLLM's llama.py (Llama, Mistral, Mixtral's attention): layer_types gives each layer's
    # window; without it every layer takes the model's sliding_window (cache_config).
    layers = facts["num_layers"]
    types, where = layer_types(k, layers, frozenset({"sliding_attention", "full_attention"}))
    if types:
        n = types.count("sliding_attention")
        sliding_layers(k, facts, n, f"{where} ({n} sliding_attention of {layers})")
        return
    window, where = k.find("sliding_window")
    if window is None:
        k.note(f"local_attention: none ({where or 'no sliding_window'})")
        return
    sliding_layers(k, facts, layers, f"every layer ({where})")


def _qwen_sliding(k: ConfigKeys, facts: Facts, *, per_layer: bool) -> None:
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
    sliding_layers(k, facts, layers, f"every layer ({where} true)")


def _llama(k: ConfigKeys) -> Facts:
    facts = base_facts(k)
    dense_mlp(k, facts)
    _typed_or_uniform_sliding(k, facts)
    return facts


def _mistral(k: ConfigKeys) -> Facts:
    return _llama(k)


def _mixtral(k: ConfigKeys) -> Facts:
    facts = _llama(k)
    moe_layers(
        k,
        facts,
        experts=("num_local_experts",),
        top_k=("num_experts_per_tok",),
        expert_size=("intermediate_size",),
    )
    return facts


def _llama4(k: ConfigKeys) -> Facts:
    facts = base_facts(k)
    # vLLM llama4.py: layer i is MoE when (i + 1) % interleave_moe_layer_step == 0, else a
    # dense MLP of intermediate_size_mlp; the MoE has one shared expert of the experts'
    # intermediate_size. (transformers' moe_layers list is not read by vLLM.)
    dense_mlp(k, facts, "intermediate_size_mlp")
    step = k.req("interleave_moe_layer_step", fact="moe.layer_step")
    if step < 1:
        raise ModelDirError(
            f"model config interleave_moe_layer_step is {step}: a Llama 4 without MoE layers",
            fix=FIX,
        )
    moe_layers(
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


def _qwen(k: ConfigKeys) -> Facts:
    facts = base_facts(k)
    dense_mlp(k, facts)
    _qwen_sliding(k, facts, per_layer=True)
    return facts


def _qwen_moe(k: ConfigKeys) -> Facts:
    facts = base_facts(k)
    dense_mlp(k, facts)
    _qwen_sliding(k, facts, per_layer=False)
    # vLLM qwen2_moe.py / qwen3_moe.py: a layer is MoE unless listed in mlp_only_layers,
    # when its 1-based index is a multiple of decoder_sparse_step.
    dense_only, _ = k.int_list("mlp_only_layers")
    if dense_only:
        raise ModelDirError(
            f"model config lists mlp_only_layers {shown(dense_only)}, a dense-layer pattern "
            "servekit cannot describe",
            fix="state model.architecture.moe in the profile by hand",
        )
    step = k.req("decoder_sparse_step", fact="moe.layer_step")
    shared_size = k.opt("shared_expert_intermediate_size", fact="moe.shared_expert_size")
    moe_layers(
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


def _gemma(k: ConfigKeys, pattern_key: str | None, pattern: int) -> Facts:
    facts = base_facts(k)
    dense_mlp(k, facts)
    # vLLM gemma2.py / gemma3.py window each layer by layer_types; transformers builds it,
    # when absent, as sliding unless (i + 1) % pattern == 0.
    layers = facts["num_layers"]
    types, where = layer_types(k, layers, frozenset({"sliding_attention", "full_attention"}))
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
    sliding_layers(k, facts, n, how)
    return facts


def _gemma2(k: ConfigKeys) -> Facts:
    return _gemma(k, None, 2)


def _gemma3(k: ConfigKeys) -> Facts:
    return _gemma(k, "sliding_window_pattern", 6)


def _gemma4(k: ConfigKeys) -> Facts:
    for key, what in (
        ("hidden_size_per_layer_input", "per-layer input embeddings"),
        ("num_kv_shared_layers", "KV-cache sharing across layers"),
    ):
        if k.opt(key):
            raise ModelDirError(
                f"model config sets {key} ({what}), which servekit cannot describe",
                fix=f"state model.architecture in the profile by hand from {NEEDED_KEYS}",
            )
    facts = base_facts(k)
    dense_mlp(k, facts)
    layers = facts["num_layers"]
    types, where = layer_types(k, layers, frozenset({"sliding_attention", "full_attention"}))
    if not types:  # transformers: 5 sliding then 1 full; the last layer always full
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
        where = "layer_types absent, every 6th layer full"
    types[-1] = "full_attention"
    # Full-attention layers use global_head_dim, and num_global_key_value_heads when
    # attention_k_eq_v (their K doubles as V); sliding layers head_dim and
    # num_key_value_heads (transformers Gemma4TextConfig.per_layer_config, vLLM gemma4.py).
    local_heads, local_dim = facts["num_kv_heads"], facts["head_dim"]
    for fact in ("head_dim", "num_kv_heads"):  # what base_facts read is the sliding layers' fact
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
    sliding_layers(
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
        moe_layers(
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


def _deepseek(k: ConfigKeys) -> Facts:
    facts = base_facts(k)
    dense_mlp(k, facts)
    mla_attention(k, facts)
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
    moe_layers(
        k,
        facts,
        experts=("n_routed_experts",),
        top_k=("num_experts_per_tok",),
        expert_size=("moe_intermediate_size",),
        shared=k.opt("n_shared_experts", fact="moe.num_shared_experts") or 0,
        first_dense=k.req("first_k_dense_replace", fact="moe.first_dense_layers"),
    )
    return facts


def _gpt_oss(k: ConfigKeys) -> Facts:
    facts = base_facts(k)
    dense_mlp(k, facts)
    moe_layers(
        k,
        facts,
        experts=("num_local_experts",),
        top_k=("num_experts_per_tok", "experts_per_token"),
        expert_size=("intermediate_size",),
    )
    # vLLM gpt_oss.py windows the even layers (layer_idx % 2 == 0) whatever layer_types says;
    # the shipped layer_types alternate the same way from a sliding layer 0.
    layers = facts["num_layers"]
    types, where = layer_types(k, layers, frozenset({"sliding_attention", "full_attention"}))
    n = (layers + 1) // 2
    stated = types.count("sliding_attention") if types else None
    how = f"every even layer, vLLM gpt_oss.py ({n} of {layers}"
    if stated is None:
        how += "; layer_types absent)"
    elif types == ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]:
        how += f"; {where} agrees)"
    else:
        how += f"; {where} says {stated}, which vLLM does not follow)"
    sliding_layers(k, facts, n, how)
    facts["moe"]["expert_bias"] = True
    k.note("moe.expert_bias: gpt_oss (vLLM gpt_oss.py MLPBlock: FusedMoE(has_bias=True))")
    facts["attention_sinks"] = True
    k.note("attention_sinks: gpt_oss (one learned sink per head, vLLM gpt_oss.py)")
    return facts


def _minimax_m2(k: ConfigKeys) -> Facts:
    types, where = k.int_list("attn_type_list")
    if types and any(t != 1 for t in types):
        raise ModelDirError(
            f"model config {where} has linear-attention layers (0), which servekit cannot describe",
            fix=f"state model.architecture in the profile by hand from {NEEDED_KEYS}",
        )
    facts = base_facts(k)
    # vLLM minimax_m2.py: every layer is MoE; the experts' width is intermediate_size.
    shared = k.opt("shared_intermediate_size") or 0
    moe_layers(
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


def read_generic(k: ConfigKeys) -> Facts:
    """A config without model_type: the standard Hugging Face keys, as read before #15."""
    facts = base_facts(k)
    if k.opt("kv_lora_rank") is not None:
        mla_attention(k, facts)
    num_experts = k.opt("n_routed_experts", "num_local_experts", "num_experts")
    if num_experts:
        expert_size = k.req("moe_intermediate_size", "intermediate_size")
        shared_size = k.opt("shared_expert_intermediate_size")
        moe_layers(
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
        dense_mlp(k, facts)
    return facts


# model_type -> its reader (a config without model_type: read_generic).
FAMILIES: dict[str, Callable[[ConfigKeys], Facts]] = {
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

# Multimodal wrappers: the text backbone's model_type when text_config does not state it.
WRAPPERS = {"llama4": "llama4_text", "mistral3": "mistral", "gemma3": "gemma3_text",
             "gemma4": "gemma4_text"}  # fmt: skip
