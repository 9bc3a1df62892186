"""Checkpoint reader (shell): measures a local model directory without loading tensors.

`read_checkpoint` reads `config.json` and only the JSON header of each safetensors
shard (8-byte little-endian header length N, then N bytes of JSON mapping tensor
name -> {dtype, shape, data_offsets}, plus an optional "__metadata__"). Tensor bytes
come from `data_offsets` exactly and are grouped by tensor name so they can be set
against the planner's per-group weight estimate.

`architecture_from_config` is pure: it turns a Hugging Face `config.json` dict into
`servekit.specs.ArchitectureSpec`, the facts a profile states.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import TypeAdapter, ValidationError

from servekit.errors import ModelDirError
from servekit.specs import ArchitectureSpec

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
GROUPS = ("embeddings", "attention", "dense_mlp", "experts", "other")
HEADER_LENGTH_BYTES = 8  # the u64 that opens every safetensors file
# The safetensors format caps the JSON header at 100 MB; a larger length is corrupt.
MAX_HEADER_BYTES = 100_000_000

# Bits per element in safetensors' own dtype spelling (the file format's table, which
# names types servekit.units never needs, such as packed F4 and F6).
SAFETENSORS_DTYPE_BITS: dict[str, int] = {
    "F4": 4,
    **dict.fromkeys(("F6_E2M3", "F6_E3M2"), 6),
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E4M3", "F8_E4M3FNUZ", "F8_E5M2"), 8),
    **dict.fromkeys(("F8_E5M2FNUZ", "F8_E8M0"), 8),
    **dict.fromkeys(("I16", "U16", "F16", "BF16"), 16),
    **dict.fromkeys(("I32", "U32", "F32"), 32),
    **dict.fromkeys(("I64", "U64", "F64", "C64"), 64),
}

# Name patterns, matched against dot-separated name components, first match wins:
#   other      vision tower / projector components, and any component naming a norm
#              (`*norm*`, `ln_*`), including norms inside attention such as q_a_layernorm
#   experts    `experts` (routed) and `shared_expert` / `shared_experts`
#   embeddings `embed_tokens`, `tok_embeddings`, `lm_head`, `wte`, `word_embeddings`,
#              `shared_head` (the MTP layer's LM head), and a top-level `output.weight`
#   other      routers: a module named `gate`, `router` or `shared_expert_gate`
#   attention  `self_attn`, `attn`, `attention`, `self_attention`, `cross_attn`,
#              `linear_attn` (so q/k/v/o, q_a/q_b/kv_a/kv_b and the indexer)
#   dense_mlp  `mlp`, `feed_forward`, `ffn`
#   other      everything else
# A scale tensor (last component `scale` or ending `_scale`, `_scale_inv`, `_scale_<n>`)
# joins the group of the weight in the same module; with no such weight it is of an
# unknown kind (e.g. a KV-cache `self_attn.k_scale`) and goes to other.
_VISION = frozenset({"visual", "vision_tower", "vision_model", "multi_modal_projector"})
_EXPERTS = frozenset({"experts", "shared_expert", "shared_experts"})
_EMBEDDINGS = frozenset(
    {"embed_tokens", "tok_embeddings", "lm_head", "wte", "word_embeddings", "shared_head"}
)
_ROUTERS = frozenset({"gate", "router", "shared_expert_gate"})
_ATTENTION = frozenset(
    {"self_attn", "attn", "attention", "self_attention", "cross_attn", "linear_attn"}
)
_DENSE_MLP = frozenset({"mlp", "feed_forward", "ffn"})
_NORM = re.compile(r"norm|^ln(_|$)")
_SCALE = re.compile(r"(^|_)scale(_inv|_\d+)?$")
_MAX_NAMED = 10  # missing shards named in an error before "and N more"


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What a local checkpoint holds, measured from its safetensors headers.

    Attributes:
        model_dir: the directory that was read.
        config: the parsed `config.json`.
        total_bytes: tensor bytes over all shards.
        group_bytes: tensor bytes per group, keyed by every name in `GROUPS`.
        tensor_count: tensors over all shards.
        shard_count: safetensors files read.
        dtypes: tensor bytes per safetensors dtype code (`BF16`, `F8_E4M3`, ...).
    """

    model_dir: Path
    config: dict[str, Any]
    total_bytes: int
    group_bytes: dict[str, int]
    tensor_count: int
    shard_count: int
    dtypes: dict[str, int]


@dataclass(frozen=True, slots=True)
class _Tensor:
    name: str
    dtype: str
    nbytes: int


def tensor_group(name: str) -> str:
    """Return the group of a tensor from its name alone (see the patterns above).

    Scale tensors are grouped by their module here; `read_checkpoint` sends scales
    whose module holds no weight to other.
    """
    parts = name.split(".")
    if any(p in _VISION or _NORM.search(p) for p in parts):
        return "other"
    if any(p in _EXPERTS for p in parts):
        return "experts"
    if any(p in _EMBEDDINGS for p in parts) or _is_top_level_output(parts):
        return "embeddings"
    if len(parts) >= 2 and parts[-2] in _ROUTERS:
        return "other"
    if any(p in _ATTENTION for p in parts):
        return "attention"
    if any(p in _DENSE_MLP for p in parts):
        return "dense_mlp"
    return "other"


def _is_top_level_output(parts: list[str]) -> bool:
    # `output.weight` is the LM head in Mistral/Llama consolidated naming; inside a
    # numbered layer an `output` module is something else (e.g. BERT's FFN output).
    return parts[-2:] == ["output", "weight"] and not any(p.isdigit() for p in parts)


def read_checkpoint(model_dir: str | Path) -> CheckpointInfo:
    """Read a model directory's config and safetensors headers; never loads tensor data.

    Shards are the files named in `model.safetensors.index.json`'s `weight_map` when
    the index exists, else every `*.safetensors` file in the directory.

    Args:
        model_dir: the checkpoint directory.

    Returns:
        The measured checkpoint.

    Raises:
        ModelDirError: the directory, `config.json` or a listed shard is missing, or a
            file is malformed (bad header length, bad JSON, offsets past the end of the
            file, or a byte count that disagrees with dtype x shape).
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise ModelDirError(
            f"model directory {root} does not exist",
            fix="pass --model-dir a downloaded checkpoint directory",
        )
    config = _read_json_object(root / CONFIG_FILE, what="model config")
    tensors: list[_Tensor] = []
    shards = _shard_paths(root)
    for shard in shards:
        tensors.extend(_read_header(shard))
    return _summarize(root, config, tensors, shard_count=len(shards))


def _summarize(
    root: Path, config: dict[str, Any], tensors: list[_Tensor], *, shard_count: int
) -> CheckpointInfo:
    weight_modules = {
        t.name.rpartition(".")[0] for t in tensors if not _SCALE.search(t.name.rpartition(".")[2])
    }
    group_bytes = dict.fromkeys(GROUPS, 0)
    dtypes: dict[str, int] = {}
    for t in tensors:
        module, _, leaf = t.name.rpartition(".")
        if _SCALE.search(leaf) and module not in weight_modules:
            group = "other"
        else:
            group = tensor_group(t.name)
        group_bytes[group] += t.nbytes
        dtypes[t.dtype] = dtypes.get(t.dtype, 0) + t.nbytes
    return CheckpointInfo(
        model_dir=root,
        config=config,
        total_bytes=sum(t.nbytes for t in tensors),
        group_bytes=group_bytes,
        tensor_count=len(tensors),
        shard_count=shard_count,
        dtypes=dtypes,
    )


def _read_json_object(path: Path, *, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ModelDirError(
            f"{what} {path.name} is missing from {path.parent}",
            fix="download the complete checkpoint or pass --model-dir a complete one",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelDirError(
            f"{what} {path} is not readable JSON ({exc})",
            fix="re-download the file",
        ) from None
    if not isinstance(data, dict):
        raise ModelDirError(
            f"{what} {path} holds a {type(data).__name__}, not a JSON object",
            fix="re-download the file",
        )
    return data


def _shard_paths(root: Path) -> list[Path]:
    index_path = root / INDEX_FILE
    if not index_path.exists():
        shards = sorted(root.glob("*.safetensors"))
        if not shards:
            raise ModelDirError(
                f"{root} holds no *.safetensors files",
                fix="download the checkpoint's safetensors weights into it",
            )
        return shards
    weight_map = _read_json_object(index_path, what="shard index").get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ModelDirError(
            f"{index_path} has no weight_map of tensor name -> shard file",
            fix="re-download the index file",
        )
    names = sorted(set(weight_map.values()))
    missing = [n for n in names if not (root / n).is_file()]
    if missing:
        shown = ", ".join(missing[:_MAX_NAMED])
        if len(missing) > _MAX_NAMED:
            shown += f" and {len(missing) - _MAX_NAMED} more"
        raise ModelDirError(
            f"{root} is missing {len(missing)} of {len(names)} shard(s) listed in "
            f"{INDEX_FILE}: {shown}",
            fix="download the missing shard(s) or pass --model-dir a complete checkpoint",
        )
    return [root / n for n in names]


def _read_header(path: Path) -> list[_Tensor]:
    """Read one shard's header and return its tensors, checking every size."""
    fix = "re-download this shard; it is truncated or not a safetensors file"
    try:
        file_bytes = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(HEADER_LENGTH_BYTES)
            if len(prefix) < HEADER_LENGTH_BYTES:
                raise ModelDirError(
                    f"{path} is {file_bytes} bytes, too short for a safetensors header", fix=fix
                )
            (header_bytes,) = struct.unpack("<Q", prefix)
            if header_bytes > MAX_HEADER_BYTES:
                raise ModelDirError(
                    f"{path} declares a {header_bytes}-byte header, over the format's "
                    f"{MAX_HEADER_BYTES}-byte limit",
                    fix=fix,
                )
            if header_bytes > file_bytes - HEADER_LENGTH_BYTES:
                raise ModelDirError(
                    f"{path} declares a {header_bytes}-byte header but the file is "
                    f"{file_bytes} bytes",
                    fix=fix,
                )
            raw = f.read(header_bytes)
    except OSError as exc:
        raise ModelDirError(f"{path} cannot be read ({exc})", fix="check its permissions") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelDirError(f"{path} has a header that is not JSON ({exc})", fix=fix) from None
    if not isinstance(header, dict):
        raise ModelDirError(f"{path} has a header that is not a JSON object", fix=fix)
    data_bytes = file_bytes - HEADER_LENGTH_BYTES - header_bytes
    return [
        _parse_entry(path, name, entry, data_bytes=data_bytes, fix=fix)
        for name, entry in header.items()
        if name != "__metadata__"
    ]


def _parse_entry(path: Path, name: str, entry: Any, *, data_bytes: int, fix: str) -> _Tensor:
    if not isinstance(entry, dict):
        raise ModelDirError(f"{path}: tensor {name!r} has a malformed header entry", fix=fix)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if (
        not isinstance(dtype, str)
        or not _is_int_list(shape)
        or not _is_int_list(offsets)
        or len(offsets) != 2
    ):
        raise ModelDirError(
            f"{path}: tensor {name!r} needs dtype, shape and two data_offsets, got {entry!r}",
            fix=fix,
        )
    begin, end = offsets
    if not 0 <= begin <= end <= data_bytes:
        raise ModelDirError(
            f"{path}: tensor {name!r} has data_offsets [{begin}, {end}] outside the "
            f"{data_bytes}-byte data section",
            fix=fix,
        )
    nbytes = end - begin
    bits = SAFETENSORS_DTYPE_BITS.get(dtype)
    if bits is not None:
        expected_bits = math.prod(shape) * bits
        if expected_bits != nbytes * 8:
            raise ModelDirError(
                f"{path}: tensor {name!r} is {dtype} {shape}, which is "
                f"{expected_bits / 8:g} bytes, but its data_offsets span {nbytes} bytes",
                fix=fix,
            )
    return _Tensor(name=name, dtype=dtype, nbytes=nbytes)


def _is_int_list(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    )


def architecture_from_config(config: Mapping[str, Any]) -> ArchitectureSpec:
    """Return the architecture facts a Hugging Face `config.json` states.

    A multimodal config's `text_config` describes the served language backbone; keys
    absent there are looked up at the top level. Attention is "mla" when
    `kv_lora_rank` is set, else "full" (indexed sparse attention and vision facts are
    not derived; state them in the profile). `head_dim` is `qk_nope_head_dim +
    qk_rope_head_dim` under MLA, else `head_dim`, else `hidden_size /
    num_attention_heads`.

    Args:
        config: the parsed `config.json`.

    Returns:
        The validated facts.

    Raises:
        ModelDirError: a required key is missing or a value is out of range.
    """
    text = config.get("text_config")
    cfg = _Lookup(config, text if isinstance(text, Mapping) else {})
    hidden = cfg.require_int("hidden_size")
    heads = cfg.require_int("num_attention_heads")
    facts: dict[str, Any] = {
        "attention": "full",
        "num_layers": cfg.require_int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": cfg.optional_int("num_key_value_heads") or heads,
        "vocab_size": cfg.require_int("vocab_size"),
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
    }
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if dtype is not None:
        facts["dtype"] = _serving_dtype(str(dtype))
    if cfg.get("kv_lora_rank") is not None:
        mla = {
            key: cfg.require_int(key)
            for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        }
        facts["attention"] = "mla"
        facts["mla"] = {**mla, "q_lora_rank": cfg.optional_int("q_lora_rank")}
        facts["head_dim"] = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    else:
        facts["head_dim"] = cfg.optional_int("head_dim") or (hidden // heads if heads > 0 else 0)
    num_experts = cfg.optional_int("n_routed_experts", "num_local_experts", "num_experts")
    if num_experts:
        expert_size = cfg.require_int("moe_intermediate_size", "intermediate_size")
        shared_size = cfg.optional_int("shared_expert_intermediate_size")
        facts["moe"] = {
            "num_experts": num_experts,
            "top_k": cfg.require_int("num_experts_per_tok", "experts_per_token"),
            "expert_intermediate_size": expert_size,
            "num_shared_experts": cfg.optional_int("n_shared_experts") or int(bool(shared_size)),
            "shared_expert_intermediate_size": shared_size,
            "first_dense_layers": cfg.optional_int("first_k_dense_replace") or 0,
        }
        facts["intermediate_size"] = cfg.optional_int("intermediate_size") or expert_size
    else:
        facts["intermediate_size"] = cfg.require_int("intermediate_size")
    try:
        return TypeAdapter(ArchitectureSpec).validate_python(facts)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        more = len(exc.errors()) - 1
        raise ModelDirError(
            f"model config gives an invalid {key}: {first['msg']} (got {first.get('input')!r})"
            + (f" (+{more} more)" if more else ""),
            fix="correct config.json or state model.architecture in the profile",
        ) from None


def _serving_dtype(name: str) -> str:
    dtype = name.removeprefix("torch.")
    # vLLM's --dtype auto serves float32 checkpoints in bfloat16 on GPUs that have it.
    return "bfloat16" if dtype == "float32" else dtype


class _Lookup:
    """Keys of a text backbone's config first, then of the top-level config."""

    def __init__(self, top: Mapping[str, Any], text: Mapping[str, Any]) -> None:
        self._layers = (text, top)

    def get(self, key: str, default: Any = None) -> Any:
        for layer in self._layers:
            if layer.get(key) is not None:
                return layer[key]
        return default

    def optional_int(self, *keys: str) -> int | None:
        for key in keys:
            value = self.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise ModelDirError(
                    f"model config key {key!r} is {value!r}, not an integer",
                    fix="correct config.json or state model.architecture in the profile",
                )
            return value
        return None

    def require_int(self, *keys: str) -> int:
        value = self.optional_int(*keys)
        if value is None:
            names = " or ".join(repr(k) for k in keys)
            raise ModelDirError(
                f"model config has no {names}",
                fix="add it to config.json or state model.architecture in the profile",
            )
        return value
