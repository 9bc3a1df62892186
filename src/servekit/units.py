"""Units and dtype sizes (core): the one table of bytes per element and GiB helpers."""

from __future__ import annotations

from servekit.errors import ConfigError

GIB = 1 << 30
MIB = 1 << 20

# Bytes per stored element for activation, KV-cache and unquantized weight dtypes.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_ds_mla": 1,
    "int8": 1,
    "int32": 4,
    "int64": 8,
}

# vLLM's --kv-cache-dtype "auto" stores the cache in the model's activation dtype.
KV_DTYPE_AUTO = "auto"


def dtype_bytes(name: str) -> float:
    """Return bytes per element of a dtype name.

    Raises:
        ConfigError: the dtype is not in the table.
    """
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError:
        known = ", ".join(sorted(DTYPE_BYTES))
        raise ConfigError(f"unknown dtype {name!r}", fix=f"use one of: {known}") from None


def to_gib(n_bytes: float) -> float:
    """Convert bytes to GiB (2^30 bytes), the unit vLLM's logs print."""
    return n_bytes / GIB


def from_gib(gib: float) -> int:
    """Convert GiB to whole bytes."""
    return round(gib * GIB)
