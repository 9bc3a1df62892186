"""Doctor's probes: NVML through a fake, docker through a fake runner, real model files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from fake_nvml import FakeGpu, FakeNvml
from model_files import write_model

from servekit.doctor.probes import (
    host_path,
    probe_docker,
    probe_gpus,
    probe_model_dir,
    probe_model_dirs,
    probe_shm,
)
from servekit.profiles import load_profile

M3 = "minimax-m3-mxfp8-8xa800"


def test_nvml_gpus_are_read_with_nvlink_and_mig() -> None:
    """Name (bytes or str), memory, capability, active links and MIG come from NVML."""
    fake = FakeNvml(gpus=[FakeGpu(), FakeGpu(links=0, mig=1), FakeGpu(mig=None)])
    report = probe_gpus(fake)
    assert report.error is None
    assert report.driver_version == "535.183.01"
    assert report.cuda_driver_version == "12.2"
    first, second, third = report.gpus
    assert first.name == "NVIDIA A800-SXM4-80GB"
    assert first.compute_capability == "8.0"
    assert first.memory_bytes == 81920 * 2**20
    assert (first.nvlink_links, second.nvlink_links) == (8, 0)
    assert (first.mig_enabled, second.mig_enabled, third.mig_enabled) == (False, True, False)
    assert fake.shutdowns == 1


def test_nvml_that_cannot_start_is_reported_not_raised() -> None:
    """No driver: an empty report with NVML's message."""
    report = probe_gpus(FakeNvml(init_error="NVML Shared Library Not Found"))
    assert report.gpus == ()
    assert "NVML Shared Library Not Found" in (report.error or "")


def test_real_nvml_on_this_machine_never_raises() -> None:
    """Whatever this machine has, the real probe returns a report."""
    report = probe_gpus()
    assert report.gpus or report.error


def _runner(outputs: dict[str, tuple[int, str, str]]) -> Any:
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        code, out, err = outputs[argv[1]]
        return subprocess.CompletedProcess(argv, code, out, err)

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_docker_without_daemon() -> None:
    """The CLI answers for itself; the server part is missing; stderr's reason is kept."""
    refused = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
    run = _runner({"version": (1, json.dumps({"Client": {"Version": "28.2.2"}, "Server": None}),
                               refused)})  # fmt: skip
    report = probe_docker(run=run, which=lambda _: "/usr/bin/docker")
    assert report.client_version == "28.2.2"
    assert report.server_version is None
    assert "Cannot connect" in (report.engine_error or "")


def test_docker_with_daemon_and_nvidia_runtime() -> None:
    """Versions from `docker version`, runtimes from `docker info`."""
    version = {"Client": {"Version": "28.2.2"}, "Server": {"Version": "28.2.2"}}
    run = _runner({"version": (0, json.dumps(version), ""),
                   "info": (0, json.dumps({"nvidia": {}, "runc": {}}), "")})  # fmt: skip
    report = probe_docker(run=run, which=lambda _: "/usr/bin/docker")
    assert report.server_version == "28.2.2"
    assert report.runtimes == ("nvidia", "runc")


def test_no_docker_cli() -> None:
    """No docker on PATH: an empty report, nothing run."""
    assert probe_docker(run=_runner({}), which=lambda _: None).cli_path is None


def test_shm_size_is_read() -> None:
    """This machine's /dev/shm has a size; a missing path is an error, not a crash."""
    assert (probe_shm().total_bytes or 0) > 0
    assert probe_shm("/nonexistent-shm").error


def test_complete_model_dir(tmp_path: Path) -> None:
    """Every shard in the index is present and its header matches its size."""
    write_model(tmp_path / "m")
    report = probe_model_dir("model", "/models/m", str(tmp_path / "m"))
    assert report.exists
    assert report.error is None
    assert report.shard_count == 2
    assert report.total_bytes == 2 * 64 * 64 * 4
    assert (report.free_bytes or 0) > 0


def test_missing_shard_is_named(tmp_path: Path) -> None:
    """A shard listed in the index but absent is named in the error."""
    write_model(tmp_path / "m")
    (tmp_path / "m" / "model-00002-of-00002.safetensors").unlink()
    report = probe_model_dir("model", "/m", str(tmp_path / "m"))
    assert "model-00002-of-00002.safetensors" in (report.error or "")


def test_truncated_shard_is_reported(tmp_path: Path) -> None:
    """A shard shorter than its header says is an error naming the file."""
    write_model(tmp_path / "m")
    shard = tmp_path / "m" / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    report = probe_model_dir("model", "/m", str(tmp_path / "m"))
    assert report.error is not None
    assert "model-00001-of-00002" in report.error


def test_engine_paths_map_through_the_model_mount(tmp_path: Path) -> None:
    """/models/X in the container is deploy.host_model_dir/X on the host; drafts too."""
    profile = load_profile(M3, overrides=[f"deploy.host_model_dir={tmp_path}"])
    assert host_path(profile, "/models/MiniMax-M3-MXFP8") == f"{tmp_path}/MiniMax-M3-MXFP8"
    assert host_path(profile, "/elsewhere/x") == "/elsewhere/x"
    write_model(tmp_path / "MiniMax-M3-MXFP8")
    model, draft = probe_model_dirs(profile)
    assert model.exists
    assert model.error is None
    assert draft.role == "draft"
    assert not draft.exists
