"""The config.json facts every family reader shares (core): layers, widths, heads,
vocabulary and dtype; a dense MLP; per-layer attention types; sliding-window layers; MoE;
multi-head latent attention (MLA).

Each reader of `plan.config_families` combines these with its family's own rules; every
fact gets its source line (`ConfigKeys.note`).
"""

from __future__ import annotations

from servekit.errors import ModelDirError
from servekit.plan.config_keys import FIX, NEEDED_KEYS, ConfigKeys, Facts, shown


def base_facts(k: ConfigKeys) -> Facts:
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
        if facts["dtype"] == str(dtype).removeprefix("torch."):
            k.note(f"dtype: {where}")
        else:
            k.note(f"dtype: {where} says {dtype}; served as {facts['dtype']} (vLLM's dtype "
                   "auto on a GPU)")  # fmt: skip
    else:
        k.note("dtype: torch_dtype absent, bfloat16 (vLLM's dtype auto)")
    return facts


def _serving_dtype(name: str) -> str:
    dtype = name.removeprefix("torch.")
    # vLLM's --dtype auto serves float32 checkpoints in bfloat16 on GPUs that have it.
    return "bfloat16" if dtype == "float32" else dtype


def dense_mlp(k: ConfigKeys, facts: Facts, key: str = "intermediate_size") -> None:
    """A dense MLP of `key`'s width (intermediate_size)."""
    facts["intermediate_size"] = k.req(key, fact="intermediate_size")


def layer_types(k: ConfigKeys, num_layers: int, allowed: frozenset[str]) -> tuple[list[str], str]:
    """The config's `layer_types` (each one of `allowed`) and where it says so; none: []."""
    value, where = k.find("layer_types")
    if value is None:
        return [], ""
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ModelDirError(f"model config layer_types is {shown(value)}, not a list", fix=FIX)
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


def sliding_layers(k: ConfigKeys, facts: Facts, sliding: int, how: str, **extra: int) -> None:
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


def moe_layers(
    k: ConfigKeys,
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
    """Record the MoE: experts, top-k, expert width, shared experts and layer pattern."""
    facts["moe"] = {
        "num_experts": k.req(*experts, fact="moe.num_experts"),
        "top_k": k.req(*top_k, fact="moe.top_k"),
        "expert_intermediate_size": k.req(*expert_size, fact="moe.expert_intermediate_size"),
        "num_shared_experts": shared,
        "shared_expert_intermediate_size": shared_size,
        "first_dense_layers": first_dense,
        "layer_step": step,
    }


def mla_attention(k: ConfigKeys, facts: Facts) -> None:
    """Record multi-head latent attention (DeepSeek's MLA) and its head_dim."""
    mla = {
        key: k.req(key, fact=f"mla.{key}")
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    }
    facts["attention"] = "mla"
    facts["mla"] = {**mla, "q_lora_rank": k.opt("q_lora_rank", fact="mla.q_lora_rank")}
    facts["head_dim"] = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    k.note("head_dim: qk_nope_head_dim + qk_rope_head_dim (MLA)")
