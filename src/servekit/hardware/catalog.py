"""Load and query the GPU catalog (core: the packaged YAML, read once, is program data)."""

from __future__ import annotations

import difflib
from functools import cache
from importlib.resources import files

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servekit.errors import ConfigError
from servekit.specs import GpuSpec


class _GpuEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    aliases: list[str] = Field(default_factory=list)
    memory_mib: int = Field(gt=0)
    cuda_visible_mib: int | None = Field(default=None, gt=0)
    hbm_gb_s: float = Field(gt=0)
    nvlink_gb_s: float | None = None
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    fp8: bool
    bf16_dense_tflops: float = Field(gt=0)
    sources: list[str] = Field(min_length=1)


class _Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int
    gpus: dict[str, _GpuEntry]


@cache
def _load() -> tuple[dict[str, GpuSpec], dict[str, str]]:
    text = files("servekit.hardware").joinpath("gpus.yaml").read_text(encoding="utf-8")
    try:
        catalog = _Catalog.model_validate(yaml.safe_load(text))
    except ValidationError as exc:  # a packaging defect, still reported clearly
        raise ConfigError(
            f"GPU catalog gpus.yaml is invalid: {exc}",
            fix="reinstall servekit; the packaged catalog is damaged",
        ) from None
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
        )
        for alias in [name, *entry.aliases]:
            aliases[alias.lower()] = name
    return specs, aliases


def load_catalog() -> dict[str, GpuSpec]:
    """Return the packaged GPU catalog keyed by canonical name."""
    return dict(_load()[0])


def gpu_names() -> list[str]:
    """Return the canonical GPU names in the catalog."""
    return sorted(_load()[0])


def lookup_gpu(name: str) -> GpuSpec:
    """Return the catalog entry for a GPU name or alias (case-insensitive).

    Raises:
        ConfigError: no catalog entry matches; the message lists the close names.
    """
    specs, aliases = _load()
    canonical = aliases.get(name.lower())
    if canonical is None:
        close = difflib.get_close_matches(name, gpu_names(), n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ConfigError(
            f"unknown GPU {name!r}",
            fix=f"{hint}known GPUs: {', '.join(gpu_names())}",
        )
    return specs[canonical]
