"""Structure of the rendered Kubernetes Deployment and Service."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from servekit.errors import ConfigError
from servekit.profiles import Profile, load_profile
from servekit.render import render, vllm_serve_args
from servekit.render.container import resource_name
from servekit.render.k8s import k8s_quantity

M3 = "minimax-m3-mxfp8-8xa800"


def _docs(profile: Profile) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the rendered Deployment and Service."""
    deployment, service = yaml.safe_load_all(render(profile, "k8s"))
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    return deployment, service


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


@pytest.mark.parametrize(("profile_name", "gpus"), [(M3, 8), ("llama-3.1-70b-4xh100", 4)])
def test_gpu_limit_is_gpus_per_node(profile_name: str, gpus: int) -> None:
    """The container's nvidia.com/gpu limit is hardware.gpus_per_node."""
    deployment, _ = _docs(load_profile(profile_name))
    assert _container(deployment)["resources"]["limits"] == {"nvidia.com/gpu": gpus}


def test_container_runs_vllm_serve_with_model_and_flags() -> None:
    """The container runs `vllm serve` with args = model path then the flags."""
    profile = load_profile(M3)
    deployment, _ = _docs(profile)
    container = _container(deployment)
    assert container["command"] == ["vllm", "serve"]
    assert container["args"] == ["/models/MiniMax-M3-MXFP8", *vllm_serve_args(profile)]
    assert container["env"] == [{"name": "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "value": "0"}]
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("timeout_s", [1800, 3600, 1805, 7])
def test_startup_probe_allows_the_startup_timeout(timeout_s: int) -> None:
    """startupProbe failureThreshold x periodSeconds covers deploy.startup_timeout_s."""
    profile = load_profile(M3, overrides=[f"deploy.startup_timeout_s={timeout_s}"])
    probe = _container(_docs(profile)[0])["startupProbe"]
    assert probe["httpGet"] == {"path": "/health", "port": "http"}
    assert probe["failureThreshold"] * probe["periodSeconds"] >= timeout_s
    assert (probe["failureThreshold"] - 1) * probe["periodSeconds"] < timeout_s


def test_readiness_and_liveness_probe_health() -> None:
    """Readiness and liveness probes both hit /health on the http port."""
    container = _container(_docs(load_profile(M3))[0])
    for name in ["readinessProbe", "livenessProbe"]:
        assert container[name]["httpGet"] == {"path": "/health", "port": "http"}


def test_shm_is_a_memory_volume_at_dev_shm() -> None:
    """/dev/shm is a memory-backed emptyDir, unbounded when shm_size is unset."""
    deployment, _ = _docs(load_profile(M3))
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    mounts = _container(deployment)["volumeMounts"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in mounts


def test_shm_size_becomes_size_limit() -> None:
    """deploy.shm_size (docker syntax) becomes the emptyDir sizeLimit in Kubernetes units."""
    deployment, _ = _docs(load_profile(M3, overrides=["deploy.shm_size=16g"]))
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}


def test_model_dir_is_a_read_only_host_path() -> None:
    """deploy.host_model_dir is a hostPath volume mounted read-only at container_model_dir."""
    deployment, _ = _docs(load_profile(M3))
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["models"]["hostPath"] == {"path": "/data/models", "type": "Directory"}
    mounts = _container(deployment)["volumeMounts"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in mounts


def test_service_maps_deploy_port_to_the_container() -> None:
    """The ClusterIP Service exposes deploy.port and targets the container's http port."""
    profile = load_profile(M3, overrides=["deploy.port=9000"])
    deployment, service = _docs(profile)
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 9000, "targetPort": "http", "protocol": "TCP"}
    ]
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]


def test_names_are_dns_labels_and_namespace_is_the_profiles() -> None:
    """Resource names are DNS-1035 labels derived from the profile; namespace from deploy."""
    profile = load_profile("llama-3.1-70b-4xh100", overrides=["deploy.namespace=inference"])
    for doc in _docs(profile):
        assert doc["metadata"]["name"] == "llama-3-1-70b-4xh100"
        assert doc["metadata"]["namespace"] == "inference"
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "llama-3-1-70b-4xh100"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Llama_3.1__70B", "llama-3-1-70b"),
        ("70b-model", "vllm-70b-model"),
        ("a" * 80, "a" * 63),
        ("a" * 62 + "-b", "a" * 62),
    ],
)
def test_resource_name_is_a_dns_label(name: str, expected: str) -> None:
    """Profile names are lowercased, runs of other characters become '-', max 63 chars."""
    profile = load_profile(M3).model_copy(update={"name": name})
    assert resource_name(profile) == expected


def test_invalid_namespace_is_a_config_error() -> None:
    """A namespace that is not a DNS-1123 label is refused with a fix."""
    with pytest.raises(ConfigError, match="Inference_NS"):
        render(load_profile(M3, overrides=["deploy.namespace=Inference_NS"]), "k8s")


def test_output_has_no_yaml_aliases() -> None:
    """Shared label dicts are written out in full, never as YAML anchors and aliases."""
    text = render(load_profile(M3), "k8s")
    assert "&id" not in text
    assert "*id" not in text


def test_dollar_signs_are_escaped_from_variable_expansion() -> None:
    """Each `$` in args is doubled so Kubernetes does not expand `$(VAR)`."""
    profile = load_profile(M3, overrides=["served_model_name=a$(HOME)b"])
    assert "a$$(HOME)b" in _container(_docs(profile)[0])["args"]


@pytest.mark.parametrize(
    ("size", "quantity"),
    [
        ("16g", "16Gi"),
        ("16G", "16Gi"),
        ("16gb", "16Gi"),
        ("16GiB", "16Gi"),
        ("512m", "512Mi"),
        ("1.5g", "1536Mi"),
        ("2048k", "2Mi"),
        ("1000", "1000"),
        ("1t", "1Ti"),
    ],
)
def test_k8s_quantity_reads_docker_sizes(size: str, quantity: str) -> None:
    """Docker size strings convert to exact Kubernetes binary quantities."""
    assert k8s_quantity(size) == quantity


@pytest.mark.parametrize("size", ["lots", "16x", "-1g", ""])
def test_k8s_quantity_rejects_non_sizes(size: str) -> None:
    """A shm_size that is not a size is a ConfigError with a fix."""
    with pytest.raises(ConfigError, match="not a size"):
        k8s_quantity(size)
