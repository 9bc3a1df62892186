"""Machine probes (shell): NVML, the docker CLI and engine, /dev/shm, model directories.

Each probe returns a fact record from `doctor.facts` and never raises for a missing
piece: no NVIDIA driver, no docker, no model directory are findings, not crashes.
Tests inject a fake NVML module and a fake `run` for docker.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servekit.doctor.facts import (
    DockerReport,
    GpuInfo,
    GpuReport,
    ModelDirReport,
    ShmReport,
)
from servekit.errors import ModelDirError
from servekit.plan.checkpoint import path_kind, read_checkpoint
from servekit.profiles.schema import Profile
from servekit.render.container import host_path

DOCKER_TIMEOUT_S = 15
"""How long one docker CLI call may take (a hung daemon socket must not hang doctor)."""

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def _text(value: Any) -> str:
    """NVML returns bytes in old bindings and str in new ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_gpus(nvml: Any = None) -> GpuReport:
    """Ask NVML for the driver and every GPU.

    Args:
        nvml: an object with pynvml's functions (tests pass a fake); None imports pynvml.

    Returns:
        The GPUs, or an empty report with the reason (no driver, no library, NVML error).
    """
    if nvml is None:
        try:
            import pynvml  # type: ignore[import-untyped]
        except ImportError:
            return GpuReport(error="nvidia-ml-py (pynvml) is not installed")
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return GpuReport(error=f"NVML cannot start: {exc} (no NVIDIA driver on this machine?)")
    try:
        gpus = tuple(_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount()))
        return GpuReport(
            driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=_cuda_version(nvml),
            gpus=gpus,
        )
    except Exception as exc:  # pynvml raises a family of NVMLError subclasses
        return GpuReport(error=f"NVML failed while reading the GPUs: {exc}")
    finally:
        with contextlib.suppress(Exception):  # shutting down a half-broken NVML
            nvml.nvmlShutdown()


def _cuda_version(nvml: Any) -> str | None:
    try:
        raw = int(nvml.nvmlSystemGetCudaDriverVersion())
    except Exception:  # an optional fact; old drivers lack the call
        return None
    return f"{raw // 1000}.{raw % 1000 // 10}"


def _gpu(nvml: Any, index: int) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    return GpuInfo(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=f"{major}.{minor}",
        nvlink_links=_nvlink_links(nvml, handle),
        mig_enabled=_mig_enabled(nvml, handle),
    )


def _nvlink_links(nvml: Any, handle: Any) -> int:
    """Active NVLink links; a link NVML does not support ends the count."""
    active = 0
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception:  # NVMLError_NotSupported past the last link
            break
        active += int(state == getattr(nvml, "NVML_FEATURE_ENABLED", 1))
    return active


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # GPUs without MIG raise NotSupported
        return False
    return bool(current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))


def probe_docker(
    run: Runner = subprocess.run, which: Callable[[str], str | None] = shutil.which
) -> DockerReport:
    """Find the docker CLI, ask it for the engine's version and registered runtimes."""
    cli = which("docker")
    if cli is None:
        return DockerReport()
    try:
        version = _run_docker(run, cli, "version", "{{json .}}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return DockerReport(cli_path=cli, engine_error=f"docker version failed: {exc}")
    document = _json_object(version.stdout)
    client = _version_of(document.get("Client"))
    server = _version_of(document.get("Server"))
    if server is None:
        lines = [line for line in version.stderr.splitlines() if line.strip()]
        error = lines[-1].strip() if lines else f"docker version exited {version.returncode}"
        return DockerReport(cli_path=cli, client_version=client, engine_error=error)
    try:
        info = _run_docker(run, cli, "info", "{{json .Runtimes}}")
        runtimes = tuple(sorted(_json_object(info.stdout)))
    except (OSError, subprocess.TimeoutExpired):
        runtimes = ()
    return DockerReport(
        cli_path=cli, client_version=client, server_version=server, runtimes=runtimes
    )


def _run_docker(
    run: Runner, cli: str, command: str, template: str
) -> subprocess.CompletedProcess[str]:
    """`docker COMMAND --format TEMPLATE`, bounded in time, never raising on its exit code."""
    argv = [cli, command, "--format", template]
    return run(argv, capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text.strip() or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _version_of(part: Any) -> str | None:
    if isinstance(part, dict) and isinstance(part.get("Version"), str):
        return str(part["Version"])
    return None


def probe_shm(path: str = "/dev/shm") -> ShmReport:  # noqa: S108 - its size only
    """The size of the shared-memory file system."""
    try:
        stats = os.statvfs(path)
    except OSError as exc:
        return ShmReport(path=path, total_bytes=None, error=str(exc))
    return ShmReport(path=path, total_bytes=stats.f_frsize * stats.f_blocks)


def probe_model_dir(role: str, engine_path: str, host: str) -> ModelDirReport:
    """Read a model directory's config, index and safetensors headers (no tensor data)."""
    free = _free_bytes(Path(host))
    kind = path_kind(Path(host))
    if kind != "a directory":
        found = None if kind == "missing" else kind
        return ModelDirReport(role, engine_path, host, exists=False, free_bytes=free, kind=found)
    try:
        checkpoint = read_checkpoint(host)
    except ModelDirError as exc:
        return ModelDirReport(role, engine_path, host, exists=True, error=str(exc), free_bytes=free)
    return ModelDirReport(
        role,
        engine_path,
        host,
        exists=True,
        shard_count=checkpoint.shard_count,
        total_bytes=checkpoint.total_bytes,
        free_bytes=free,
    )


def probe_model_dirs(profile: Profile, model_dir: Path | None = None) -> tuple[ModelDirReport, ...]:
    """The profile's model and (for a draft-model or EAGLE method) draft directories.

    Args:
        profile: the deployment.
        model_dir: the model's directory on this machine, overriding the profile's mount.
    """
    model = profile.model.path
    reports = [probe_model_dir("model", model, str(model_dir or host_path(profile, model)))]
    spec = profile.speculative
    if spec is not None and spec.config.model is not None and spec.config.method != "ngram":
        draft = spec.config.model
        reports.append(probe_model_dir("draft", draft, host_path(profile, draft)))
    return tuple(reports)


def _free_bytes(path: Path) -> int | None:
    """Free bytes on the file system holding `path` or its nearest existing parent."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None
