"""A profile from a model's config.json (core): facts, GPU and vLLM's own defaults as data.

`new_profile_document` turns `servekit.plan.model_config.ModelFacts`, the GPU catalog entry,
the GPU count and the engine version into the plain mapping a profile file holds. Every
serve argument the user leaves out gets the value that vLLM version would choose, and
`model.sources` says where each fact and default came from. Validation (and `--set`
overrides) is `servekit.profiles.profile_from_data`'s job.

vLLM's defaults, by version (read in vllm/engine/arg_utils.py `get_batch_defaults` and
`_set_default_max_num_seqs_and_batched_tokens_args` of the installed v0.32.0, and in the
pull requests that changed them):

- v0.8.5 on (PR #17073, merged 2025-04-23): a GPU whose NVML memory total is >= 70 GiB
  gets max_num_seqs 1024 and max_num_batched_tokens 8192 for the OpenAI server; others
  256 and 2048. From v0.9.0 (PR #17885, 2025-05-09) a device named "a100" is excluded
  from the large tier. Before v0.8.5 only H100/H200 by name got 8192 (PR #12369, v0.7.1)
  and max_num_seqs was 256 everywhere.
- v0.26.0 on (PR #51726, merged 2026-08-10, after v0.25.0 of 2026-07-13): >= 160 GiB
  (B200 class) gets max_num_batched_tokens 16384.
- The memory total is NVML's (vllm/platforms/cuda.py `NvmlCudaPlatform`), i.e.
  nvidia-smi's figure. NVML reports none on a unified-memory GB10, the query raises and
  vLLM falls back to the small tier (its 0.13 log prints max_num_batched_tokens=2048).
- The token budget is capped at max_num_seqs x max_model_len (raised to max_model_len
  first when chunked prefill is off), and max_num_seqs at the token budget.
- gpu_memory_utilization: 0.9, and 0.92 from v0.25.0 (vllm/config/cache.py of v0.25.0 and
  v0.32.0; the change lies between v0.19.0 and v0.25.0, v0.20-v0.24 are taken as 0.9).
- max_model_len: the smallest of the text config's length keys (vllm
  `derive_max_model_len_and_key`), `model_max_length` winning, times the RoPE scaling
  factor for the rope types that do not already scale max_position_embeddings (never
  for Gemma 3) (`_get_and_verify_max_len`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servekit.errors import ConfigError, UsageError
from servekit.names import NEWEST_KNOWN_ENGINE
from servekit.plan.engine_rules import release_or_zero
from servekit.plan.model_config import ModelFacts
from servekit.specs import GpuSpec
from servekit.units import GIB, MIB

ENGINE_IMAGE = "vllm/vllm-openai"
_LENGTH_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
    "model_max_length", "max_target_positions", "max_sequence_length", "max_seq_length",
    "seq_len",
)  # fmt: skip
# RoPE types whose max_position_embeddings already holds the scaled length, per release
# (vllm/config/model.py _get_and_verify_max_len): up to 0.28.0 only su, longrope and llama3,
# and YaRN restarts from original_max_position_embeddings before the factor is applied; from
# 0.30.0 (read in the 0.30.0 wheel; 0.29 not read) YaRN and its DeepSeek variants are taken
# as already scaled too.
_PRESCALED_ROPE_OLD = frozenset({"su", "longrope", "llama3"})
_PRESCALED_ROPE = _PRESCALED_ROPE_OLD | {"yarn", "deepseek_yarn", "deepseek_llama_scaling"}
_YARN_PRESCALED_FROM = (0, 30, 0)


@dataclass(frozen=True, slots=True)
class BatchDefaults:
    """vLLM's OpenAI-server batch defaults for one GPU and version, and why."""

    max_num_seqs: int
    max_num_batched_tokens: int
    reason: str


def batch_defaults(gpu: GpuSpec, version: str) -> BatchDefaults:
    """max_num_seqs and max_num_batched_tokens vLLM's OpenAI server picks on `gpu`."""
    v = release_or_zero(version)
    nvml_gib = 0.0 if gpu.unified_memory else gpu.memory_mib * MIB / GIB
    name = gpu.device_name.lower()
    what = (
        "no NVML memory total (unified memory)"
        if gpu.unified_memory
        else (f"NVML total {nvml_gib:.1f} GiB")
    )
    if v < (0, 8, 5):
        large = "h100" in name or "h200" in name
        return BatchDefaults(256, 8192 if large else 2048, f"vLLM < 0.8.5, {gpu.device_name}")
    a100_small = v >= (0, 9, 0) and "a100" in name
    if v >= (0, 26, 0) and nvml_gib >= 160:
        return BatchDefaults(1024, 16384, f"vLLM >= 0.26.0, {what} >= 160 GiB")
    if nvml_gib >= 70 and not a100_small:
        return BatchDefaults(1024, 8192, f"vLLM >= 0.8.5, {what} >= 70 GiB")
    why = "an A100 (excluded since 0.9.0)" if a100_small and nvml_gib >= 70 else f"{what} < 70 GiB"
    return BatchDefaults(256, 2048, f"vLLM >= 0.8.5, {why}")


def default_gpu_memory_utilization(version: str) -> float:
    """vLLM's default --gpu-memory-utilization for `version`."""
    return 0.92 if release_or_zero(version) >= (0, 25, 0) else 0.9


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, Mapping) else config


def derived_max_model_len(
    config: Mapping[str, Any], version: str = NEWEST_KNOWN_ENGINE
) -> tuple[int, str]:
    """The max_model_len vLLM `version` derives from a config when none is given, and its
    source.

    Raises:
        ConfigError: the config states no length key.
    """
    text = _text_config(config)
    found = {
        k: v for k in _LENGTH_KEYS if isinstance(v := text.get(k), int) and not isinstance(v, bool)
    }
    if not found:
        raise ConfigError(
            f"model config has none of {', '.join(_LENGTH_KEYS[:3])}, ... to derive max_model_len",
            fix="pass --set max_model_len=TOKENS",
        )
    key = "model_max_length" if "model_max_length" in found else min(found, key=found.__getitem__)
    length = float(found[key])
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    note = f"config {key} {found[key]}"
    model_type = str(text.get("model_type", ""))
    if isinstance(rope, Mapping) and "gemma3" not in model_type:
        kind = rope.get("rope_type") or rope.get("type")
        factor = rope.get("factor")
        new_rule = release_or_zero(version) >= _YARN_PRESCALED_FROM
        prescaled = _PRESCALED_ROPE if new_rule else _PRESCALED_ROPE_OLD
        original = rope.get("original_max_position_embeddings")
        if kind not in prescaled and isinstance(factor, int | float) and factor > 0:
            if kind == "yarn" and isinstance(original, int) and original > 0:
                length, note = (
                    float(original),
                    f"rope_scaling original_max_position_embeddings {original}",
                )
            length *= factor
            note += f" x rope_scaling factor {factor} ({kind}, vLLM {version})"
        elif kind in prescaled:
            note += f" ({kind} RoPE: already the scaled length in vLLM {version})"
    return int(length), f"max_model_len {int(length)}: {note} (vLLM's default when unset)"


def _architecture(facts: ModelFacts) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v is not None}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    return dict(clean(dataclasses.asdict(facts.architecture)))


def split_gpus(gpus: int, overrides: Mapping[str, Any]) -> int:
    """The tensor_parallel_size that fills `gpus` with the given PP and DP sizes."""
    pp = int(overrides.get("pipeline_parallel_size") or 1)
    dp = int(overrides.get("data_parallel_size") or 1)
    if pp <= 0 or dp <= 0 or gpus % (pp * dp):
        raise UsageError(
            f"--gpus {gpus} is not a multiple of pipeline_parallel_size {pp} x "
            f"data_parallel_size {dp}",
            fix="make TP x PP x DP equal --gpus",
        )
    return gpus // (pp * dp)


def new_profile_document(
    name: str,
    facts: ModelFacts,
    config: Mapping[str, Any],
    gpu: GpuSpec,
    gpus: int,
    *,
    model_path: str,
    engine_version: str = NEWEST_KNOWN_ENGINE,
    from_file: str = "config.json",
) -> dict[str, Any]:
    """The profile mapping for `facts` on `gpus` x `gpu`, before any `--set`.

    Serve arguments the user sets later replace these values; `fill_serve_defaults`
    then recomputes what depends on them.
    """
    sources = [f"{s} ({from_file})" for s in facts.sources] or [
        f"architecture from {from_file} (model_type {facts.model_type})"
    ]
    return {
        "name": name,
        "description": f"{facts.model_type} from {from_file} on {gpus}x {gpu.name} "
        "(servekit profiles new)",
        "model": {
            "path": model_path,
            "quantization": facts.quantization,
            "quantized_layers": facts.quantized_layers,
            "architecture": _architecture(facts),
            "sources": sources,
        },
        "hardware": {"gpu": gpu.name, "gpus_per_node": gpus},
        "engine": {"image": f"{ENGINE_IMAGE}:v{engine_version}", "version": engine_version},
        "serve_args": {},
    }


def fill_serve_defaults(
    document: dict[str, Any], config: Mapping[str, Any], gpu: GpuSpec, gpus: int
) -> None:
    """Give every serve argument the user did not set vLLM's default for this version/GPU,
    and record each default's source in model.sources."""
    args: dict[str, Any] = document.setdefault("serve_args", {})
    sources: list[str] = document["model"].setdefault("sources", [])
    if args:
        sources.append(f"serve_args set with --set: {', '.join(args)}")
    version = str(document["engine"]["version"])
    if "max_model_len" not in args:
        args["max_model_len"], why = derived_max_model_len(config, version)
        sources.append(why)
    if "tensor_parallel_size" not in args:
        args["tensor_parallel_size"] = split_gpus(gpus, args)
    batch = batch_defaults(gpu, version)
    length = args["max_model_len"]
    seqs_set, tokens_set = "max_num_seqs" in args, "max_num_batched_tokens" in args
    seqs = args.get("max_num_seqs", batch.max_num_seqs)
    if not tokens_set and isinstance(seqs, int) and isinstance(length, int):
        tokens, cap = batch.max_num_batched_tokens, "at most max_num_seqs x max_model_len"
        if args.get("enable_chunked_prefill") is False:  # a whole prompt in one step
            tokens, cap = max(tokens, length), "at least max_model_len without chunked prefill"
        args["max_num_batched_tokens"] = min(tokens, seqs * length)
        sources.append(
            f"max_num_batched_tokens {args['max_num_batched_tokens']}: vLLM default "
            f"({batch.reason}; {cap})"
        )
    if not seqs_set:
        # a max_model_len that is not a number left no token default: the profile's
        # validation names the bad value below
        budget = args.get("max_num_batched_tokens", batch.max_num_batched_tokens)
        args["max_num_seqs"] = min(seqs, budget) if isinstance(budget, int) else seqs
        sources.append(f"max_num_seqs {args['max_num_seqs']}: vLLM default ({batch.reason})")
    if "gpu_memory_utilization" not in args:
        args["gpu_memory_utilization"] = default_gpu_memory_utilization(version)
        sources.append(
            f"gpu_memory_utilization {args['gpu_memory_utilization']}: vLLM {version} default"
        )
    online = args.get("quantization")
    if online == "fp8" and document["model"].get("quantization") == "bf16":
        document["model"]["quantization"] = "fp8"
        sources.append("quantization fp8: serve_args quantization fp8 (online) of 16-bit weights")


def check_engine_version(version: str) -> str:
    """A version `profiles new` plans for: digits as vLLM spells them, not newer than known.

    Raises:
        UsageError: not a version, or newer than servekit has read.
    """
    text = version.strip().lstrip("v")
    parts = text.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise UsageError(
            f"--engine-version {version!r} is not a vLLM version",
            fix=f"give e.g. --engine-version {NEWEST_KNOWN_ENGINE}",
        )
    if release_or_zero(text) > release_or_zero(NEWEST_KNOWN_ENGINE):
        raise UsageError(
            f"--engine-version {text} is newer than the newest vLLM servekit knows "
            f"({NEWEST_KNOWN_ENGINE})",
            fix=f"plan with --engine-version {NEWEST_KNOWN_ENGINE} or an older release",
        )
    return text
