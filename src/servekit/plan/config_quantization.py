"""A config's `quantization_config` -> quantization scheme (core), and the layers it covers.

Maps each `quant_method` (fp8, fbgemm_fp8, compressed-tensors, awq, gptq, auto-round, mxfp4,
modelopt) to a scheme of `servekit.plan.quantization.SCHEMES`, and to `quantized_layers`
"experts" when attention is left unquantized or only expert modules are targeted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from servekit.errors import ModelDirError
from servekit.plan.config_keys import shown
from servekit.plan.quantization import SCHEMES, grouped_int_scheme
from servekit.specs import QuantizedLayers

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
        raise _quant_error(f"has {where} {shown(block)}; servekit knows [128, 128] blocks")
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
                raise _quant_error(f"has FP4 group_size {shown(size)}; servekit knows 16, 32")
            schemes.add(fp4)
        elif kind == "int":
            group = size if isinstance(size, int) and strategy == "group" else -1
            zero = not weights.get("symmetric", True)
            schemes.add(_int_scheme(bits, group, zero_point=zero, method="compressed-tensors"))
        else:
            raise _quant_error(
                f"(compressed-tensors) has {shown(kind)} {bits}-bit weights servekit does not map"
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


def quantization_from_config(
    config: Mapping[str, Any], dtype: str
) -> tuple[str, QuantizedLayers, str]:
    """The scheme, the layers it covers, and a source line, from quantization_config."""
    qc = config.get("quantization_config")
    if qc is None:
        text = config.get("text_config")
        qc = text.get("quantization_config") if isinstance(text, Mapping) else None
    if qc is None:
        scheme = "fp16" if dtype == "float16" else "bf16"
        return scheme, "linear", f"quantization: none (quantization_config absent), {dtype}"
    if not isinstance(qc, Mapping):
        raise _quant_error(f"is {shown(qc)}, not an object")
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
                f"has auto-round packing_format {shown(packing)} / data_type "
                f"{shown(qc.get('data_type'))}; servekit maps the integer GPTQ/AWQ formats"
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
            raise _quant_error(f"has modelopt quant_algo {shown(algo)}; servekit knows FP8, NVFP4")
        how = f"quant_method modelopt, quant_algo {algo}"
        skipped = qc.get("exclude_modules")
    else:
        raise _quant_error(
            f"has quant_method {shown(method)}; servekit maps fp8, fbgemm_fp8, "
            "compressed-tensors, awq, gptq, auto-round, mxfp4 and modelopt"
        )
    if _covers_attention(skipped):
        return scheme, "experts", f"quantization: {how}; attention left unquantized -> experts"
    return scheme, "linear", f"quantization: {how}"
