"""A corpus entry's launch settings read as servekit's planner takes them (core): the
catalog GPU its GPU string names, its vLLM version, its `--set` arguments in vLLM's
spelling, how its weights are stored and which speculative method it used.

`plan.fidelity` joins these into a `LaunchPlan` for each real startup of the corpus.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from servekit.errors import ConfigError
from servekit.hardware import lookup_gpu
from servekit.plan.fidelity_corpus import StartupRecord
from servekit.units import GIB, MIB

# Launch-config words that mean "no quantization" (the checkpoint's 16-bit dtype).
UNQUANTIZED = frozenset({"bf16", "bfloat16", "fp16", "float16", "half", "auto", "none"})
# Speculative methods that load no draft weights and add no KV layers.
DRAFTLESS_METHODS = frozenset({"ngram", "suffix"})
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
# "H200 x8" or "8x H200" / "2 x RTX 3090": a GPU count before or after the name.
_GPU_COUNT = re.compile(r"(?:\s+x\s*(\d+)\b|^\s*(\d+)\s*x\s+)", re.IGNORECASE)
_GPU_SIZE = re.compile(r"\b(\d+)\s*GB\b", re.IGNORECASE)
_DEVICE_NAME = re.compile(r"device_name=([A-Za-z0-9_]+)")
_DCP_LOGGED = re.compile(r"(?:dcp_world_size|decode_context_parallel_size=)\s*(\d+)")
_METHOD = re.compile(r"['\"]method['\"]\s*:\s*['\"](\w+)")


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """The catalog GPU a corpus GPU string names, and how many the entry used."""

    name: str
    count: int | None
    note: str | None = None


def resolve_gpu(text: str | None, reported_gib: float | None = None) -> GpuChoice | str:
    """Map a corpus GPU string (e.g. 'NVIDIA H100 80GB (from the run name)') to the catalog.

    The text before any parenthesis is the GPU; ' xN' or 'Nx ' gives a count. Candidates are
    tried through the catalog's own alias lookup: the text as written, without the vendor
    words, with a memory size the entry states, and a device_name the log printed.
    """
    if not text:
        return "GPU: the entry does not name its GPU"
    head, _, rest = text.partition("(")
    count_match = _GPU_COUNT.search(head)
    count = int(count_match.group(1) or count_match.group(2)) if count_match else None
    head = _GPU_COUNT.sub("", head).strip()
    names = [head]
    if not _GPU_SIZE.search(head):
        names += [f"{head} {size}GB" for size in dict.fromkeys(_GPU_SIZE.findall(rest))]
    names += [name.replace("_", " ") for name in _DEVICE_NAME.findall(rest)]
    for name in names:
        for candidate in _spellings(name):
            try:
                gpu = lookup_gpu(candidate)
            except ConfigError:
                continue
            notes = []
            if name != head:
                notes.append(f"GPU {head!r} read as {candidate!r} from the entry's text")
            if "inferred" in rest:
                notes.append("the corpus infers the GPU from context")
            if reported_gib is not None:
                catalog_gib = gpu.cuda_visible_mib * MIB / GIB
                if abs(catalog_gib - reported_gib) > 0.005 * reported_gib:
                    notes.append(
                        f"the log reports {reported_gib:.2f} GiB in total; the catalog's "
                        f"{gpu.name} has {catalog_gib:.2f} GiB"
                    )
            return GpuChoice(gpu.name, count, "; ".join(notes) or None)
    return (
        f"GPU: {head!r} is not in the GPU catalog (servekit/hardware/gpus.yaml) "
        "under any spelling the entry gives"
    )


def _spellings(name: str) -> list[str]:
    short = re.sub(r"^(NVIDIA\s+)?(GeForce\s+)?", "", name).strip()
    out = [name, short, short.replace(" ", "-")]
    return [s for s in dict.fromkeys(out) if s]


def engine_version(text: str | None) -> str | None:
    """'0.13.0+faa43dbf.nv26.01 (NGC 26.01)' -> '0.13.0'; None when no version is given."""
    match = _VERSION.search(text or "")
    if match is None:
        return None
    major, minor, patch = match.groups()
    return f"{major}.{minor}.{patch or 0}"


def serve_sets(
    entry: StartupRecord, config: Mapping[str, Any], *, stand_in: bool = False
) -> tuple[list[str], list[str]]:
    """The entry's launch settings as `--set` arguments (vLLM spelling), and notes.

    `stand_in`: `config` is a related model's, not the checkpoint's own.
    """
    sets: list[str] = []
    notes: list[str] = []

    def put(key: str, value: object) -> None:
        if value is not None:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            sets.append(f"{key}={text}")

    put("tensor_parallel_size", entry.tp)
    put("pipeline_parallel_size", entry.pp)
    if entry.dp and entry.dp > 1:
        put("data_parallel_size", entry.dp)
    if entry.ep:
        put("enable_expert_parallel", True)
    put("gpu_memory_utilization", entry.gpu_memory_utilization)
    at = entry.figures.get("max_concurrency_at_tokens")
    if entry.max_model_len is None and at:
        notes.append(f"max_model_len {int(at)} from the log's concurrency line")
    put("max_model_len", entry.max_model_len or (int(at) if at else None))
    put("max_num_seqs", entry.max_num_seqs)
    put("max_num_batched_tokens", entry.max_num_batched_tokens)
    put("block_size", entry.block_size)
    put("kv_cache_dtype", entry.kv_cache_dtype)
    put("enforce_eager", entry.enforce_eager)
    if quantization_kind(entry, config, stand_in=stand_in) == "online-fp8":
        put("quantization", "fp8")
        notes.append("online fp8 quantization of a 16-bit checkpoint")
    dcp = decode_context_parallel(entry)
    if dcp is not None and dcp > 1:
        put("decode_context_parallel_size", dcp)
    for name, value in sorted(entry.env.items()):
        if _ENV_NAME.fullmatch(name) and str(value).strip():
            sets.append(f"env.{name}={str(value).split()[0]}")
    unknown = [
        k
        for k in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size")
        if not any(s.startswith(f"{k}=") for s in sets)
    ]
    if unknown:
        notes.append(f"not in the entry, planner defaults: {', '.join(unknown)}")
    return sets, notes


def decode_context_parallel(entry: StartupRecord) -> int | None:
    """The DCP size: the entry's field, else what the log printed (dcp_world_size N)."""
    if entry.dcp is not None:
        return entry.dcp
    for line in entry.log_lines:
        match = _DCP_LOGGED.search(line)
        if match:
            return int(match.group(1))
    return None


QuantizationKind = Literal["checkpoint", "unquantized", "online-fp8", "unknown"]


def quantization_kind(
    entry: StartupRecord, config: Mapping[str, Any], *, stand_in: bool = False
) -> QuantizationKind:
    """How the weights are stored: the config's own scheme, 16-bit, online fp8, or unknown.

    'unknown' is a quantized launch whose config carries no `quantization_config` (a
    stand-in base config, or a config copy without it): its weight bytes would be a guess.
    'fp8' means vLLM's online `--quantization fp8` only on the checkpoint's own 16-bit
    config: on a stand-in (`stand_in`) or with a checkpoint format named (compressed
    tensors) the checkpoint itself is quantized and its scheme is not in the corpus.
    """
    if _has_quantization_config(config):
        return "checkpoint"
    text = (entry.quantization or "bf16").lower()
    words = re.findall(r"[a-z0-9_\-]+", text)
    first = words[0] if words else "bf16"
    if first in UNQUANTIZED:
        return "unquantized"
    if first == "fp8" and not stand_in and "compressed" not in text:
        return "online-fp8"
    return "unknown"


def _has_quantization_config(config: Mapping[str, Any]) -> bool:
    text = config.get("text_config")
    inner = text.get("quantization_config") if isinstance(text, Mapping) else None
    return bool(config.get("quantization_config") or inner)


def speculative_method(entry: StartupRecord) -> str | None:
    """The speculative method ('eagle', 'mtp', ...) an entry used, or None."""
    spec = entry.speculative
    if spec is None:
        return None
    if isinstance(spec, dict):
        return str(spec.get("method", "unknown")).lower()
    match = _METHOD.search(spec)
    word = match.group(1) if match else (spec.split() or ["unknown"])[0]
    return word.lower()
