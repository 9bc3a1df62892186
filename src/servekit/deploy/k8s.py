"""Kubernetes manifests of a profile (core): a Deployment and a ClusterIP Service.

Arguments are a YAML list (no shell). Kubernetes expands `$(VAR)` in `args` and
env values, so each `$` there is written `$$`, which it turns back into `$`.
The startup probe allows `deploy.startup_timeout_s` for loading (a 427B model
takes ten minutes or more) before the liveness probe may restart the pod.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from servekit.deploy import shell
from servekit.deploy._container import (
    CONTAINER_PORT,
    HEALTH_PATH,
    gpu_count,
    header_lines,
    image,
    resource_name,
)
from servekit.deploy.argv import environment, vllm_serve_args
from servekit.errors import ConfigError
from servekit.profiles.schema import Profile

SHM_MOUNT_PATH = "/dev/shm"  # noqa: S108 - the container's shared memory, not a temp file
PROBE_PERIOD_S = 10
LIVENESS_PERIOD_S = 30
PROBE_TIMEOUT_S = 5
PROBE_FAILURES = 3

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Docker's size syntax (units.RAMInBytes), which profiles use for deploy.shm_size.
_SIZE = re.compile(r"^(\d+(?:\.\d+)?) ?([kmgtp]?)i?b?$", re.IGNORECASE)
_BINARY_UNITS = ("Pi", "Ti", "Gi", "Mi", "Ki")


def k8s_documents(profile: Profile) -> list[dict[str, Any]]:
    """Return the Deployment and the Service as data.

    Raises:
        ConfigError: multi-node profile, invalid namespace, shm size or env name.
    """
    name = resource_name(profile)
    labels = {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/managed-by": "servekit",
    }
    selector = {
        key: labels[key] for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance")
    }
    namespace = _namespace(profile)

    def metadata() -> dict[str, Any]:
        # Fresh copies: a shared dict would be dumped as a YAML anchor and alias.
        return {"name": name, "namespace": namespace, "labels": dict(labels)}

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(),
        "spec": {
            "replicas": 1,
            # A rolling update would start a second engine beside the first: twice the GPUs.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"containers": [_container(profile)], "volumes": _volumes(profile)},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": "http",
                    "port": profile.deploy.port,
                    "targetPort": "http",
                    "protocol": "TCP",
                }
            ],
        },
    }
    return [deployment, service]


def render_k8s(profile: Profile) -> str:
    """Return the manifests as multi-document YAML for `kubectl apply -f`.

    Raises:
        ConfigError: multi-node profile, invalid namespace, shm size or env name.
    """
    body = yaml.safe_dump_all(
        k8s_documents(profile), sort_keys=False, explicit_start=True, width=1_000_000
    )
    return "\n".join([*shell.comments(header_lines(profile)), body])


def k8s_quantity(size: str) -> str:
    """Return a docker-style size (`16g`, `512MiB`, `1.5GB`) as a Kubernetes quantity.

    Units are binary, as docker reads them.

    Example:
        `k8s_quantity("16g")` is `"16Gi"`; `k8s_quantity("1.5g")` is `"1536Mi"`.

    Raises:
        ConfigError: the text is not a size.
    """
    match = _SIZE.match(size.strip())
    if match is None:
        raise ConfigError(
            f"deploy.shm_size {size!r} is not a size", fix="write it like docker does, e.g. 16g"
        )
    number, unit = match.groups()
    power = " kmgtp".index(unit.lower() or " ")
    n_bytes = math.floor(float(number) * 1024**power)
    for exponent, suffix in zip(range(5, 0, -1), _BINARY_UNITS, strict=True):
        if n_bytes and n_bytes % 1024**exponent == 0:
            return f"{n_bytes // 1024**exponent}{suffix}"
    return str(n_bytes)


def _container(profile: Profile) -> dict[str, Any]:
    def probe(period_s: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": HEALTH_PATH, "port": "http"},
            "periodSeconds": period_s,
            "timeoutSeconds": PROBE_TIMEOUT_S,
            "failureThreshold": failures,
        }

    startup_failures = math.ceil(profile.deploy.startup_timeout_s / PROBE_PERIOD_S)
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": SHM_MOUNT_PATH}]
    if profile.deploy.host_model_dir is not None:
        mounts.append(
            {"name": "models", "mountPath": profile.deploy.container_model_dir, "readOnly": True}
        )
    container: dict[str, Any] = {
        "name": "vllm",
        "image": image(profile),
        "command": ["vllm", "serve"],
        "args": [_escape(arg) for arg in [profile.model.path, *vllm_serve_args(profile)]],
    }
    env = environment(profile)
    if env:
        container["env"] = [{"name": key, "value": _escape(value)} for key, value in env.items()]
    return container | {
        "ports": [{"name": "http", "containerPort": CONTAINER_PORT, "protocol": "TCP"}],
        "resources": {"limits": {"nvidia.com/gpu": gpu_count(profile)}},
        "startupProbe": probe(PROBE_PERIOD_S, startup_failures),
        "readinessProbe": probe(PROBE_PERIOD_S, PROBE_FAILURES),
        "livenessProbe": probe(LIVENESS_PERIOD_S, PROBE_FAILURES),
        "volumeMounts": mounts,
    }


def _volumes(profile: Profile) -> list[dict[str, Any]]:
    shm: dict[str, Any] = {"medium": "Memory"}
    if profile.deploy.shm_size is not None:
        shm["sizeLimit"] = k8s_quantity(profile.deploy.shm_size)
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": shm}]
    if profile.deploy.host_model_dir is not None:
        volumes.append(
            {
                "name": "models",
                "hostPath": {"path": profile.deploy.host_model_dir, "type": "Directory"},
            }
        )
    return volumes


def _namespace(profile: Profile) -> str:
    namespace = profile.deploy.namespace
    if not _DNS_LABEL.match(namespace):
        raise ConfigError(
            f"deploy.namespace {namespace!r} is not a Kubernetes namespace name",
            fix="use up to 63 lowercase letters, digits and '-', starting and ending alphanumeric",
        )
    return namespace


def _escape(text: str) -> str:
    return text.replace("$", "$$")
