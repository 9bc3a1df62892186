"""Structure of the rendered docker compose file."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from servekit.errors import ConfigError
from servekit.profiles import Profile, load_profile
from servekit.render import render, vllm_serve_args

M3 = "minimax-m3-mxfp8-8xa800"


def _service(profile: Profile) -> tuple[str, dict[str, Any]]:
    """Return the only service's name and body from the rendered compose file."""
    services = yaml.safe_load(render(profile, "compose"))["services"]
    assert len(services) == 1
    ((name, body),) = services.items()
    return name, body


@pytest.mark.parametrize(("profile_name", "gpus"), [(M3, 8), ("llama-3.1-70b-4xh100", 4)])
def test_gpu_reservation_is_gpus_per_node(profile_name: str, gpus: int) -> None:
    """The service reserves hardware.gpus_per_node NVIDIA GPUs."""
    _, service = _service(load_profile(profile_name))
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": gpus, "capabilities": ["gpu"]}


def test_service_runs_the_image_with_model_and_flags() -> None:
    """Image, name and the command list (model path, then flags) come from the profile."""
    profile = load_profile(M3)
    name, service = _service(profile)
    assert name == service["container_name"] == "minimax-m3-mxfp8-8xa800"
    assert service["image"] == "vllm/vllm-openai:v0.26.0"
    assert service["command"] == ["/models/MiniMax-M3-MXFP8", *vllm_serve_args(profile)]
    assert service["environment"] == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}


def test_patched_profile_uses_the_patched_image() -> None:
    """A profile with a patched image tag runs that tag, not the upstream image."""
    _, service = _service(load_profile("minimax-m3-mxfp8-8xa800-v0251-patched"))
    assert service["image"] == "vllm/vllm-openai:v0.25.1-m3patch"


def test_port_is_published_on_loopback_by_default() -> None:
    """The port is published on deploy.bind_host (127.0.0.1 by default) only."""
    _, service = _service(load_profile(M3))
    assert service["ports"] == ["127.0.0.1:8000:8000"]


def test_bind_host_and_port_come_from_deploy() -> None:
    """deploy.bind_host and deploy.port choose the published address; the container keeps 8000."""
    profile = load_profile(M3, overrides=["deploy.bind_host=0.0.0.0", "deploy.port=9000"])
    _, service = _service(profile)
    assert service["ports"] == ["0.0.0.0:9000:8000"]


def test_ipv6_bind_host_is_bracketed() -> None:
    """An IPv6 bind address is written in brackets so compose can split the port spec."""
    _, service = _service(load_profile(M3, overrides=["deploy.bind_host=::1"]))
    assert service["ports"] == ["[::1]:8000:8000"]


def test_model_dir_is_mounted_read_only() -> None:
    """deploy.host_model_dir is mounted read-only at deploy.container_model_dir."""
    _, service = _service(load_profile(M3))
    assert service["volumes"] == ["/data/models:/models:ro"]


def test_ipc_host_without_shm_size() -> None:
    """Without deploy.shm_size the service shares the host IPC namespace."""
    _, service = _service(load_profile(M3))
    assert service["ipc"] == "host"
    assert "shm_size" not in service


def test_shm_size_replaces_ipc_host() -> None:
    """With deploy.shm_size the service gets a /dev/shm of that size instead of ipc: host."""
    _, service = _service(load_profile(M3, overrides=["deploy.shm_size=16g"]))
    assert service["shm_size"] == "16g"
    assert "ipc" not in service


def test_healthcheck_waits_for_the_startup_timeout() -> None:
    """The health check curls /health and gives the model startup_timeout_s to load."""
    profile = load_profile(M3)
    _, service = _service(profile)
    check = service["healthcheck"]
    assert check["test"] == ["CMD", "curl", "-fsS", "http://localhost:8000/health"]
    assert check["start_period"] == f"{profile.deploy.startup_timeout_s}s" == "3600s"


def test_dollar_signs_are_escaped_from_interpolation() -> None:
    """Each `$` is doubled so compose passes it through instead of interpolating."""
    _, service = _service(load_profile(M3, overrides=["served_model_name=a${HOME}b"]))
    assert "a$${HOME}b" in service["command"]


def test_multi_node_profile_is_refused() -> None:
    """A profile spanning several nodes is refused by the one-node targets: ConfigError."""
    two_nodes = ["hardware.nodes=2", "pipeline_parallel_size=2"]
    for target in ("vllm", "docker", "compose"):  # k8s and script render LWS and Ray
        with pytest.raises(ConfigError, match="2 nodes"):
            render(load_profile(M3, overrides=two_nodes), target)
