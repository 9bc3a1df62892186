"""`servekit profiles list --json` and `profiles gpus --json` as typed models (core)."""

from __future__ import annotations

from typing import Literal

from servekit.results._base import Document

PROFILES_VERSION: Literal[1] = 1


class ProfileRow(Document):
    """One profile as `profiles list` shows it; a profile file that does not load has its
    name, source and error only.

    Attributes:
        name: the profile's name (its file's stem).
        source: "built-in", or the user file's path.
        model: the model path the engine serves.
        gpus: e.g. "8x A800-80GB" (nodes x GPUs per node, and the GPU).
        image: the container image it runs (the patched tag when it has patches).
        description: the profile's one-line description.
        error: why the file does not load (the loader's message).
    """

    name: str
    source: str
    model: str | None = None
    gpus: str | None = None
    image: str | None = None
    description: str | None = None
    error: str | None = None


class ProfilesDocument(Document):
    """Every profile found, the first directory in lookup order winning a name."""

    schema_version: Literal[1]
    profiles: tuple[ProfileRow, ...]


class GpuRow(Document):
    """One GPU of the catalog.

    Attributes:
        name: the catalog's name.
        device_name: what NVML reports.
        memory_mib: nvidia-smi's total memory.
        cuda_visible_mib: the total CUDA reports, which vLLM budgets from.
        unified_memory: CPU and GPU share one memory (Grace Hopper/Blackwell superchips).
        aliases: the spellings that find it (case, "-", "_" and spaces ignored).
    """

    name: str
    device_name: str
    memory_mib: int
    cuda_visible_mib: int
    unified_memory: bool
    aliases: tuple[str, ...]


class GpusDocument(Document):
    """The GPU catalog, by name."""

    schema_version: Literal[1]
    gpus: tuple[GpuRow, ...]
