"""Load and query the GPU catalog (core: the packaged YAML, read once, is program data)."""

from __future__ import annotations

import difflib
import re
from functools import cache
from importlib.resources import files

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servekit.errors import ConfigError
from servekit.specs import GpuSpec

# What `servekit` command lists the catalog, named in the unknown-GPU error.
LIST_COMMAND = "servekit profiles gpus"
_SEPARATORS = re.compile(r"[-_\s]+")


class _GpuEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    aliases: list[str] = Field(default_factory=list)
    device_name: str = Field(min_length=1)
    unified_memory: bool = False
    memory_mib: int = Field(gt=0)
    cuda_visible_mib: int | None = Field(default=None, gt=0)
    hbm_gb_s: float = Field(gt=0)
    nvlink_gb_s: float | None = None
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    fp8: bool
    bf16_dense_tflops: float = Field(gt=0)
    sm_count: int | None = Field(default=None, gt=0)
    sources: list[str] = Field(min_length=1)


class _Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int
    gpus: dict[str, _GpuEntry]


def normalize_gpu_name(name: str) -> str:
    """The lookup key of a GPU name: lower case, without '-', '_' and spaces.

    `NVIDIA_GeForce_RTX_3090`, `nvidia geforce rtx 3090` and `NVIDIA-GeForce-RTX-3090`
    are one key.
    """
    return _SEPARATORS.sub("", name).lower()


def _damaged(message: str) -> ConfigError:
    return ConfigError(message, fix="reinstall servekit; the packaged catalog is damaged")


@cache
def _load() -> tuple[dict[str, GpuSpec], dict[str, str]]:
    text = files("servekit.hardware").joinpath("gpus.yaml").read_text(encoding="utf-8")
    try:
        catalog = _Catalog.model_validate(yaml.safe_load(text))
    except ValidationError as exc:  # a packaging defect, still reported clearly
        raise _damaged(f"GPU catalog gpus.yaml is invalid: {exc}") from None
    specs: dict[str, GpuSpec] = {}
    aliases: dict[str, str] = {}
    for name, entry in catalog.gpus.items():
        specs[name] = GpuSpec(
            name=name,
            memory_mib=entry.memory_mib,
            cuda_visible_mib=entry.cuda_visible_mib or entry.memory_mib,
            hbm_gb_s=entry.hbm_gb_s,
            nvlink_gb_s=entry.nvlink_gb_s,
            compute_capability=entry.compute_capability,
            fp8=entry.fp8,
            bf16_dense_tflops=entry.bf16_dense_tflops,
            sources=tuple(entry.sources),
            device_name=entry.device_name,
            unified_memory=entry.unified_memory,
            sm_count=entry.sm_count,
        )
        for alias in [name, entry.device_name, *entry.aliases]:
            key = normalize_gpu_name(alias)
            if aliases.setdefault(key, name) != name:
                raise _damaged(f"GPU catalog alias {alias!r} names both {aliases[key]} and {name}")
    return specs, aliases


def load_catalog() -> dict[str, GpuSpec]:
    """Return the packaged GPU catalog keyed by canonical name."""
    return dict(_load()[0])


def gpu_names() -> list[str]:
    """Return the canonical GPU names in the catalog."""
    return sorted(_load()[0])


def gpu_aliases() -> dict[str, list[str]]:
    """Every canonical name with the names and aliases that find it (normalized keys)."""
    found: dict[str, list[str]] = {name: [] for name in gpu_names()}
    for key, name in sorted(_load()[1].items()):
        found[name].append(key)
    return found


def lookup_gpu(name: str) -> GpuSpec:
    """Return the catalog entry for a GPU name, alias or device name.

    Case, '-', '_' and spaces do not matter, nor a leading 'NVIDIA' (`h100`,
    `NVIDIA_H100_80GB_HBM3`, `NVIDIA L4 24GB`).

    Raises:
        ConfigError: no catalog entry matches; the message names the close entries.
    """
    specs, aliases = _load()
    key = normalize_gpu_name(name)
    bare = key.removeprefix("nvidia")
    canonical = aliases.get(key) or aliases.get(bare)
    if canonical is None:
        starts = [
            n for n in gpu_names() if len(bare) >= 3 and normalize_gpu_name(n).startswith(bare)
        ]
        if len(starts) > 1:
            raise ConfigError(
                f"GPU {name!r} is ambiguous: it names {' or '.join(starts)}",
                fix=f"name one of them (aliases: {LIST_COMMAND})",
            )
        close = [n for n in gpu_names() if bare and bare in normalize_gpu_name(n)]
        near = difflib.get_close_matches(key, list(aliases), n=6, cutoff=0.6)
        close = list(dict.fromkeys([*close, *(aliases[k] for k in near)]))[:3]
        hint = f"close: {', '.join(close)}; " if close else ""
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise ConfigError(
            f"unknown GPU {shown!r} (not in servekit's GPU catalog)",
            fix=f"{hint}known GPUs: {', '.join(gpu_names())} (with aliases: {LIST_COMMAND})",
        )
    return specs[canonical]
