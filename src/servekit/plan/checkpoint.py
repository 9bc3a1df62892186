"""Checkpoint reader (shell): measures a local model directory without loading tensors.

`read_checkpoint` reads `config.json` and only the JSON header of each safetensors
shard (8-byte little-endian header length N, then N bytes of JSON mapping tensor
name -> {dtype, shape, data_offsets}, plus an optional "__metadata__"). Tensor bytes
come from `data_offsets` exactly and are grouped by tensor name so they can be set
against the planner's per-group weight estimate.

`architecture_from_config` is pure: it turns a Hugging Face `config.json` dict into
`servekit.specs.ArchitectureSpec`, the facts a profile states (the reading is
`servekit.plan.model_config`'s).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from servekit.errors import ModelDirError
from servekit.plan.model_config import model_facts_from_config
from servekit.plan.model_path import model_path_problem
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
MAX_JSON_BYTES = (
    64 << 20
)  # config.json and the index are kilobytes; an index of 100k tensors ~10 MB
_MAX_SHOWN = 80  # characters of a name or value from a file shown in an error


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
    if (problem := model_path_problem(path_kind(root), str(root))) is not None:
        raise ModelDirError(
            problem,
            fix="pass --model-dir a downloaded checkpoint directory (the one holding config.json)",
        )
    allowed = _allowed_roots(root)
    config = _read_json_object(root / CONFIG_FILE, what="model config", allowed=allowed)
    tensors: list[_Tensor] = []
    shards = _shard_paths(root, allowed)
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


def path_kind(path: Path) -> str:
    """What is at `path`, for messages: "a directory", "a file", "missing", "a symlink loop",
    "a broken symlink", "a FIFO", "a socket", "a device" or "unreadable (...)"."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        if os.path.islink(path):
            return "a broken symlink"
        if exc.errno in {errno.ENOENT, errno.ENOTDIR}:
            return "missing"
        return f"unreadable ({exc.strerror or exc})"
    except ValueError:  # an embedded NUL byte
        return "missing"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def _shown(text: object) -> str:
    """A name or value read from a file, for an error: escaped and bounded."""
    shown = repr(text)
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."


def _allowed_roots(root: Path) -> tuple[Path, ...]:
    """Where files of the checkpoint may resolve: the directory itself, and for a Hugging
    Face cache snapshot (`models--org--name/snapshots/REV`, whose files are symlinks into
    `../../blobs`) that repository's blob store."""
    real = root.resolve()
    blobs = real.parent.parent / "blobs"
    if real.parent.name == "snapshots" and blobs.is_dir():
        return (real, blobs.resolve())
    return (real,)


def _inside(root: Path, name: str, allowed: tuple[Path, ...], *, what: str) -> Path:
    """`root / name`, refused unless it is a relative path resolving inside the checkpoint.

    Raises:
        ModelDirError: an absolute or `..` path, or a symlink resolving elsewhere.
    """
    fix = "re-download the checkpoint; every file it uses must be inside the model directory"
    parts = Path(name).parts if name and "\x00" not in name else ()
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise ModelDirError(f"{root}: {what} {_shown(name)} is not a path inside it", fix=fix)
    path = root / name
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        raise ModelDirError(f"{root}: {what} {_shown(name)} is a symlink loop", fix=fix) from None
    if not any(real.is_relative_to(base) for base in allowed):
        raise ModelDirError(
            f"{root}: {what} {_shown(name)} resolves outside the model directory", fix=fix
        )
    return path


def _read_json_object(path: Path, *, what: str, allowed: tuple[Path, ...]) -> dict[str, Any]:
    kind = path_kind(path)
    if kind == "missing":
        raise ModelDirError(
            f"{what} {path.name} is missing from {path.parent}",
            fix="download the complete checkpoint or pass --model-dir a complete one",
        )
    _inside(path.parent, path.name, allowed, what=what)
    if kind != "a file":
        raise ModelDirError(f"{what} {path} is {kind}, not a file", fix="re-download the file")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise ModelDirError(
            f"{what} {path} cannot be read ({exc.strerror or 'error'})", fix="check its permissions"
        ) from None
    if len(raw) > MAX_JSON_BYTES:
        raise ModelDirError(
            f"{what} {path} is over {MAX_JSON_BYTES} bytes", fix="re-download the file"
        )
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ModelDirError(
            f"{what} {path} is not UTF-8 text (byte {exc.start})", fix="re-download the file"
        ) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        where = (
            f" (line {exc.lineno} column {exc.colno})"
            if isinstance(exc, json.JSONDecodeError)
            else ""
        )
        raise ModelDirError(
            f"{what} {path} is not valid JSON{where}", fix="re-download the file"
        ) from None
    if not isinstance(data, dict):
        raise ModelDirError(
            f"{what} {path} holds a {type(data).__name__}, not a JSON object",
            fix="re-download the file",
        )
    return data


def _shard_paths(root: Path, allowed: tuple[Path, ...]) -> list[Path]:
    index_path = root / INDEX_FILE
    if path_kind(index_path) == "missing":
        shards = sorted(root.glob("*.safetensors"))
        if not shards:
            raise ModelDirError(
                f"{root} holds no *.safetensors files",
                fix="download the checkpoint's safetensors weights into it",
            )
        return [_inside(root, p.name, allowed, what="shard") for p in shards]
    weight_map = _read_json_object(index_path, what="shard index", allowed=allowed).get(
        "weight_map"
    )
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ModelDirError(
            f"{index_path} has no weight_map of tensor name -> shard file",
            fix="re-download the index file",
        )
    names = sorted(set(weight_map.values()))
    shards = [_inside(root, n, allowed, what=f"shard in {INDEX_FILE}") for n in names]
    missing = [n for n, p in zip(names, shards, strict=True) if path_kind(p) == "missing"]
    if missing:
        shown = ", ".join(_shown(n) for n in missing[:_MAX_NAMED])
        if len(missing) > _MAX_NAMED:
            shown += f" and {len(missing) - _MAX_NAMED} more"
        raise ModelDirError(
            f"{root} is missing {len(missing)} of {len(names)} shard(s) listed in "
            f"{INDEX_FILE}: {shown}",
            fix="download the missing shard(s) or pass --model-dir a complete checkpoint",
        )
    return shards


def _read_header(path: Path) -> list[_Tensor]:
    """Read one shard's header and return its tensors, checking every size."""
    fix = "re-download this shard; it is truncated or not a safetensors file"
    kind = path_kind(path)
    if kind != "a file":
        raise ModelDirError(f"{path} is {kind}, not a safetensors file", fix=fix)
    try:
        file_bytes = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(HEADER_LENGTH_BYTES)
            if len(prefix) < HEADER_LENGTH_BYTES:
                raise ModelDirError(
                    f"{path} is {file_bytes} bytes, too short for a safetensors header", fix=fix
                )
            # the declared length is the file's first bytes: never shown in a message
            (header_bytes,) = struct.unpack("<Q", prefix)
            if header_bytes > MAX_HEADER_BYTES:
                raise ModelDirError(
                    f"{path} declares a header over the format's {MAX_HEADER_BYTES}-byte limit",
                    fix=fix,
                )
            if header_bytes > file_bytes - HEADER_LENGTH_BYTES:
                raise ModelDirError(
                    f"{path} declares a header longer than the file ({file_bytes} bytes)",
                    fix=fix,
                )
            raw = f.read(header_bytes)
    except OSError as exc:
        raise ModelDirError(
            f"{path} cannot be read ({exc.strerror or 'error'})", fix="check its permissions"
        ) from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ModelDirError(f"{path} has a header that is not JSON", fix=fix) from None
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
        raise ModelDirError(f"{path}: tensor {_shown(name)} has a malformed header entry", fix=fix)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if (
        not isinstance(dtype, str)
        or not _is_int_list(shape)
        or not _is_int_list(offsets)
        or len(offsets) != 2
    ):
        raise ModelDirError(
            f"{path}: tensor {_shown(name)} needs a dtype, a shape and two data_offsets "
            "(non-negative integers)",
            fix=fix,
        )
    begin, end = offsets
    if not 0 <= begin <= end <= data_bytes:
        raise ModelDirError(
            f"{path}: tensor {_shown(name)} has data_offsets [{begin}, {end}] outside the "
            f"{data_bytes}-byte data section",
            fix=fix,
        )
    nbytes = end - begin
    bits = SAFETENSORS_DTYPE_BITS.get(dtype)
    if bits is not None:
        expected_bits = math.prod(shape) * bits
        if expected_bits != nbytes * 8:
            raise ModelDirError(
                f"{path}: tensor {_shown(name)} is {dtype} {shape}, which is "
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

    The facts are `servekit.plan.model_config.model_facts_from_config`'s (quantization is
    the profile's business here, so `quantization_config` is not read).

    Raises:
        ModelDirError: a required key is missing, a value is out of range, or the
            `model_type` is not one servekit reads.
    """
    return model_facts_from_config(config, read_quantization=False).architecture
