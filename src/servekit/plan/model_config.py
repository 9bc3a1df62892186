"""Model facts from a Hugging Face `config.json` (core): architecture and quantization.

`model_facts_from_config` is the one place a config dict becomes planner facts: the
architecture (`servekit.specs.ArchitectureSpec`), the checkpoint's quantization scheme
and which layers it covers, and where each fact came from. It is pure; reading files
is `servekit.plan.checkpoint`'s job.

It dispatches on `model_type` (the text backbone's, `text_config.model_type`, for a
multimodal config). `config.json` omits keys equal to the config class's default (the
nested `text_config` of Gemma 3 has no `vocab_size`), so each family knows its class's
defaults (transformers `configuration_<family>.py`) for the keys it reads, and says so
in the fact's source. The readers are beside it: `config_keys` (the key lookup and the
class defaults), `config_families` (one reader per family, with how vLLM builds its layers,
vllm/model_executor/models/<family>.py, vLLM 0.32 unless named), `config_vision` (vision
encoders) and `config_quantization` (`quantization_config` -> scheme).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from servekit.errors import ModelDirError
from servekit.plan.config_families import FAMILIES, WRAPPERS, read_generic
from servekit.plan.config_keys import FIX, NEEDED_KEYS, ConfigKeys, Facts, shown
from servekit.plan.config_quantization import quantization_from_config
from servekit.plan.config_vision import VISION, vision_config
from servekit.specs import ArchitectureSpec, QuantizedLayers

__all__ = [
    "EMBEDDINGS_ON_EVERY_STAGE",
    "KNOWN_MODEL_TYPES",
    "NEEDED_KEYS",
    "ModelFacts",
    "model_facts_from_config",
]


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


# The model_types read from config.json: the text families and the multimodal wrappers.
KNOWN_MODEL_TYPES = tuple(sorted({*FAMILIES, *WRAPPERS}))
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


def _model_type(config: Mapping[str, Any]) -> tuple[str, str]:
    """The text backbone's model_type and the top-level one ("" when absent)."""
    top = config.get("model_type")
    top = top if isinstance(top, str) else ""
    text = config.get("text_config")
    inner = text.get("model_type") if isinstance(text, Mapping) else None
    if isinstance(inner, str) and inner:
        return inner, top
    return WRAPPERS.get(top, top), top


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
    reader = FAMILIES.get(model_type) if model_type else read_generic
    if reader is None:
        raise ModelDirError(
            f"model_type {model_type!r} is not a family servekit reads from config.json "
            f"(known: {', '.join(KNOWN_MODEL_TYPES)})",
            fix=f"state model.architecture in the profile by hand from {NEEDED_KEYS}",
        )
    keys = ConfigKeys(config, family)
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
    vision_reader = VISION.get(top)
    if vision_reader is not None and vision_config(config):
        facts["vision"], line = vision_reader(config, facts["hidden_size"])
        keys.note(line)
    elif vision_config(config):
        keys.note("vision: vision_config not described; its weights are not counted")
    arch = _validated(facts)
    if read_quantization:
        scheme, layers, line = quantization_from_config(config, arch.dtype)
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


def _rope_parameters(k: ConfigKeys) -> Mapping[str, Any]:
    """The RoPE scaling dict (`rope_scaling`, or transformers 5's `rope_parameters`; for
    per-layer-type parameters, the full-attention layers')."""
    for key in ("rope_scaling", "rope_parameters"):
        value, _ = k.find(key)
        if isinstance(value, Mapping):
            nested = value.get("full_attention")
            return nested if isinstance(nested, Mapping) else value
    return {}


def _rope_cache(
    k: ConfigKeys, facts: Facts, model_type: str, max_positions: int | None
) -> Facts | None:
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
            f"(got {shown(first.get('input'))})" + (f" (+{more} more)" if more else ""),
            fix=FIX,
        ) from None
