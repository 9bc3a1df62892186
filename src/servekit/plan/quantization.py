"""Weight quantization schemes (core): bytes per stored parameter, by GPU capability.

A quantized linear layer stores `weight_bits` per value plus one scale of `scale_bytes`
per `group_size` values (a zero point stored per group counts in `scale_bytes`). GPUs
without FP8 tensor cores (sm80/sm86) run FP8-family checkpoints weight-only through
Marlin kernels, which keep the 8-bit weights but hold the scales as 16-bit values;
`marlin_scale_bytes` records that.

Grouped integer schemes are named by their layout, `int<bits>_g<group>` (a 16-bit scale
and a packed `bits`-bit zero point per group: GPTQ with sym=false, AWQ) and
`int<bits>_sym_g<group>` (a 16-bit scale per group, no zero point: symmetric GPTQ,
compressed-tensors W4A16); `lookup_scheme` builds any group size from the name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from servekit.errors import ConfigError


@dataclass(frozen=True, slots=True)
class QuantScheme:
    """Storage layout of one quantization scheme's linear-layer weights."""

    name: str
    weight_bits: int
    scale_bytes: float = 0.0
    group_size: int = 1
    needs_fp8_compute: bool = False
    marlin_scale_bytes: float | None = None

    def bytes_per_param(self, *, gpu_has_fp8: bool) -> float:
        """Return stored bytes per parameter of a quantized linear layer on this GPU."""
        scale = self.scale_bytes
        if self.needs_fp8_compute and not gpu_has_fp8 and self.marlin_scale_bytes is not None:
            scale = self.marlin_scale_bytes
        return self.weight_bits / 8 + scale / self.group_size

    def runs_weight_only(self, *, gpu_has_fp8: bool) -> bool:
        """True when this GPU cannot compute in the scheme's format (Marlin weight-only)."""
        return self.needs_fp8_compute and not gpu_has_fp8


SCHEMES: dict[str, QuantScheme] = {
    s.name: s
    for s in (
        QuantScheme("bf16", 16),
        QuantScheme("fp16", 16),
        # Per-tensor or per-channel FP8: scales are one value per tensor or row, negligible.
        QuantScheme("fp8", 8, needs_fp8_compute=True, marlin_scale_bytes=0.0),
        # DeepSeek-style FP8 with one float32 scale per 128x128 block.
        QuantScheme(
            "fp8_block",
            8,
            scale_bytes=4,
            group_size=128 * 128,
            needs_fp8_compute=True,
            marlin_scale_bytes=4,
        ),
        # OCP microscaling FP8: one E8M0 (1-byte) scale per 32 values.
        QuantScheme(
            "mxfp8", 8, scale_bytes=1, group_size=32, needs_fp8_compute=True, marlin_scale_bytes=2
        ),
        # OCP microscaling FP4: one E8M0 scale per 32 values. Marlin keeps the scales one
        # byte wide (marlin_utils_fp4.py mxfp4_marlin_process_scales ends in
        # float8_e8m0fnu, v0.10.1 and v0.19.0). MoE experts: see `mxfp4_moe_backend`.
        QuantScheme("mxfp4", 4, scale_bytes=1, group_size=32, needs_fp8_compute=True),
        # NVIDIA FP4: one FP8 scale per 16 values (the per-tensor scale is negligible).
        QuantScheme("nvfp4", 4, scale_bytes=1, group_size=16, needs_fp8_compute=True),
        # INT4 weight-only (GPTQ/AWQ) with a 16-bit scale and a packed 4-bit zero per 128 values.
        QuantScheme("int4_g128", 4, scale_bytes=2.5, group_size=128),
        # INT4 weight-only, symmetric, group 128 (compressed-tensors W4A16 pack-quantized,
        # symmetric GPTQ): a 16-bit weight_scale per 128 values and no zero point.
        QuantScheme("int4_sym_g128", 4, scale_bytes=2, group_size=128),
        # INT4 with one scale per output channel (GPTQ group_size -1): the scale is negligible.
        QuantScheme("int4", 4),
        # INT8 weights with per-channel scales (W8A8).
        QuantScheme("int8", 8),
    )
}

Mxfp4Backend = Literal["marlin", "triton", "flashinfer"]
# The MXFP4 MoE kernel vLLM picks by compute capability (v0.10.1 quantization/mxfp4.py
# Mxfp4MoEMethod; v0.12.0 to v0.18.0 get_mxfp4_backend; v0.19.0 fused_moe/oracle/mxfp4.py
# select_mxfp4_moe_backend): FlashInfer's TRT-LLM kernel on the sm100 family, OpenAI's
# Triton matmul_ogs on sm90 to sm10x when triton_kernels is present, Marlin otherwise
# (sm80/sm86/sm89 and sm120 always).
FLASHINFER_MXFP4_SM = range(100, 110)
TRITON_MXFP4_SM = range(90, 110)


def mxfp4_moe_backend(sm: int, *, triton_kernels: bool) -> Mxfp4Backend:
    """The MXFP4 MoE kernel vLLM runs on a GPU of compute capability `sm`.

    `triton_kernels`: vLLM ships triton_kernels (from v0.12.0; `Accounting.mxfp4_triton`).
    """
    if sm in FLASHINFER_MXFP4_SM:
        return "flashinfer"
    if triton_kernels and sm in TRITON_MXFP4_SM:
        return "triton"
    return "marlin"


# int<bits>[_sym]_g<group>: the grouped integer layouts named in the module docstring.
_GROUPED_INT = re.compile(r"int(?P<bits>4|8)(?P<sym>_sym)?_g(?P<group>[1-9][0-9]{0,6})")
SCALE_BYTES = 2  # GPTQ, AWQ and compressed-tensors store group scales as fp16/bf16


def grouped_int_scheme(bits: int, group_size: int, *, zero_point: bool) -> QuantScheme:
    """The integer weight-only layout with `bits`-bit weights and one 16-bit scale per
    `group_size` values, plus a `bits`-bit zero point per group when `zero_point`."""
    zero = bits / 8 if zero_point else 0.0
    name = f"int{bits}{'' if zero_point else '_sym'}_g{group_size}"
    return QuantScheme(name, bits, scale_bytes=SCALE_BYTES + zero, group_size=group_size)


def lookup_scheme(name: str) -> QuantScheme:
    """Return a quantization scheme by name.

    Raises:
        ConfigError: unknown scheme; the message lists the known ones.
    """
    key = name.lower()
    if key in SCHEMES:
        return SCHEMES[key]
    grouped = _GROUPED_INT.fullmatch(key)
    if grouped is not None:
        return grouped_int_scheme(
            int(grouped["bits"]), int(grouped["group"]), zero_point=grouped["sym"] is None
        )
    raise ConfigError(
        f"unknown quantization {name!r}",
        fix=f"use one of: {', '.join(SCHEMES)}, or int4_g<N> / int4_sym_g<N> / int8_g<N>",
    )
