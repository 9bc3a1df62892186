"""What the probes found on this machine (core data; the probes live in `probes`).

Every fact type records its failure instead of raising, so `servekit doctor` checks
everything it can on a machine that lacks GPUs, docker or the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as NVML reports it.

    Attributes:
        index: NVML device index.
        name: e.g. "NVIDIA A800-SXM4-80GB".
        memory_bytes: total memory.
        compute_capability: e.g. "8.0".
        nvlink_links: NVLink links in the active state (0 on PCIe-only cards).
        mig_enabled: True when MIG mode is on (the GPU is split into instances).
    """

    index: int
    name: str
    memory_bytes: int
    compute_capability: str
    nvlink_links: int
    mig_enabled: bool


@dataclass(frozen=True, slots=True)
class GpuReport:
    """NVML's answer: the driver and GPUs, or why there are none."""

    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: tuple[GpuInfo, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DockerReport:
    """The docker CLI, its engine, and whether the NVIDIA runtime is registered."""

    cli_path: str | None = None
    client_version: str | None = None
    server_version: str | None = None
    engine_error: str | None = None
    runtimes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShmReport:
    """Size of /dev/shm, or why it could not be read."""

    path: str
    total_bytes: int | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ModelDirReport:
    """One model directory as the host sees it.

    Attributes:
        role: "model" or "draft".
        engine_path: the path in the profile (as the engine sees it).
        host_path: where that is on this machine.
        exists: whether the directory exists.
        shard_count: safetensors shards whose headers were read.
        total_bytes: tensor bytes over the shards.
        error: what was wrong (missing config.json or shard, truncated shard), if anything.
        free_bytes: free space on the file system holding it (or its nearest parent).
        kind: what is there when it is no directory ("a file", "a symlink loop", ...);
            None when nothing is.
    """

    role: str
    engine_path: str
    host_path: str
    exists: bool
    shard_count: int = 0
    total_bytes: int = 0
    error: str | None = None
    free_bytes: int | None = None
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class MachineFacts:
    """Everything the probes found."""

    gpus: GpuReport
    docker: DockerReport
    shm: ShmReport
    model_dirs: tuple[ModelDirReport, ...] = field(default=())
