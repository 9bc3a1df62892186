"""Pieces of a Kubernetes pod that every manifest servekit renders shares (core).

The single-node Deployment and the multi-node LeaderWorkerSet build their engine
containers, labels, probes and volumes here, so the two cannot drift apart.
Kubernetes expands `$(VAR)` in a container's `command`, `args` and env values, so
every `$` servekit writes there goes through `escape`, which doubles it; Kubernetes
turns `$$` back into `$`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from servekit.errors import ConfigError
from servekit.profiles.schema import Profile
from servekit.render.argv import environment
from servekit.render.container import (
    CONTAINER_PORT,
    HEALTH_PATH,
    image,
    resource_name,
    uses_gpus,
)

SHM_MOUNT_PATH = "/dev/shm"  # noqa: S108 - the container's shared memory, not a temp file
PROBE_PERIOD_S = 10
LIVENESS_PERIOD_S = 30
PROBE_TIMEOUT_S = 5
PROBE_FAILURES = 3

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# Docker's size syntax (units.RAMInBytes), which profiles use for deploy.shm_size.
_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?([kmgtp]?)i?b?", re.IGNORECASE)
_BINARY_UNITS = ("Pi", "Ti", "Gi", "Mi", "Ki")
SECRET_SUFFIX = "-secrets"  # noqa: S105 - a name suffix, not a password
"""The Secret holding a deployment's `secret_env` values is `<resource name>-secrets`."""


def app_labels(name: str) -> dict[str, str]:
    """Return the `app.kubernetes.io` labels every object of a deployment carries."""
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/managed-by": "servekit",
    }


def app_selector(name: str) -> dict[str, str]:
    """Return the subset of `app_labels` that selects a deployment's pods."""
    labels = app_labels(name)
    return {key: labels[key] for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}


def object_metadata(profile: Profile, name: str) -> dict[str, Any]:
    """Return `metadata` for a top-level object: name, namespace, labels.

    Each call returns fresh dicts: a shared dict would be dumped as a YAML anchor
    and alias.

    Raises:
        ConfigError: deploy.namespace is not a DNS label.
    """
    return {"name": name, "namespace": namespace(profile), "labels": app_labels(name)}


def engine_container(
    profile: Profile,
    *,
    name: str,
    command: Sequence[str],
    args: Sequence[str],
    serves_http: bool,
) -> dict[str, Any]:
    """Return one engine container: image, command, env, GPUs, probes and mounts.

    Args:
        profile: the profile; its env, GPUs per node and deploy section are used.
        name: the container name.
        command: the container's command, written verbatim.
        args: the container's args; each `$` is doubled against Kubernetes expansion.
        serves_http: the container runs the API server, so it gets the `http` port
            and the startup, readiness and liveness probes on `/health`.

    Each `secret_env` variable comes from the key of its own name in the Secret
    `secret_name`; its value is never in the manifest. On a CPU host (`uses_gpus`
    false) the container requests no `nvidia.com/gpu`, which no node would offer.

    Raises:
        ConfigError: deploy.shm_size is not a size, or the GPU is not in the catalog.
    """
    container: dict[str, Any] = {
        "name": name,
        "image": image(profile),
        "command": list(command),
        "args": [escape(arg) for arg in args],
    }
    env: list[dict[str, Any]] = [
        {"name": key, "value": escape(value)} for key, value in environment(profile).items()
    ]
    env += [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": secret_name(profile), "key": key}}}
        for key in profile.secret_env
    ]
    if env:
        container["env"] = env
    if serves_http:
        container["ports"] = [{"name": "http", "containerPort": CONTAINER_PORT, "protocol": "TCP"}]
    if uses_gpus(profile):
        # One pod holds one node's share: the whole engine on one node, one pipeline stage
        # on several.
        container["resources"] = {"limits": {"nvidia.com/gpu": profile.hardware.gpus_per_node}}
    if serves_http:
        container |= health_probes(profile)
    container["volumeMounts"] = _volume_mounts(profile)
    return container


def secret_name(profile: Profile) -> str:
    """Return the name of the Secret the pods read `secret_env` from: `<resource name>-secrets`."""
    return resource_name(profile) + SECRET_SUFFIX


def secret_notes(profile: Profile) -> list[str]:
    """Return header lines telling how to create the Secret, or none without `secret_env`.

    The command reads each value from the user's own shell (`"$NAME"`), so neither
    servekit nor the manifest ever holds it; `printf` (a shell builtin) pipes the values
    to kubectl, so none is on a command line other users can read (`ps`).

    Raises:
        ConfigError: deploy.namespace is not a DNS label.
    """
    if not profile.secret_env:
        return []
    pairs = " ".join(f'{key} "${key}"' for key in profile.secret_env)
    return [
        f"Secrets: {', '.join(profile.secret_env)} come from the Secret {secret_name(profile)}, "
        "which servekit never writes; create it first, with the values from your shell:",
        f"printf '%s=%s\\n' {pairs} | kubectl create secret generic {secret_name(profile)} "
        f"--namespace {namespace(profile)} --from-env-file=/dev/stdin",
    ]


def health_probes(profile: Profile) -> dict[str, Any]:
    """Return the startup, readiness and liveness probes on the engine's `/health`.

    The startup probe allows `deploy.startup_timeout_s` (a 427B model takes ten
    minutes or more to load) before the liveness probe may restart the container.
    """

    def probe(period_s: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": HEALTH_PATH, "port": "http"},
            "periodSeconds": period_s,
            "timeoutSeconds": PROBE_TIMEOUT_S,
            "failureThreshold": failures,
        }

    startup_failures = math.ceil(profile.deploy.startup_timeout_s / PROBE_PERIOD_S)
    return {
        "startupProbe": probe(PROBE_PERIOD_S, startup_failures),
        "readinessProbe": probe(PROBE_PERIOD_S, PROBE_FAILURES),
        "livenessProbe": probe(LIVENESS_PERIOD_S, PROBE_FAILURES),
    }


def pod_volumes(profile: Profile) -> list[dict[str, Any]]:
    """Return the pod's volumes: a memory-backed `/dev/shm` and the model hostPath.

    Raises:
        ConfigError: deploy.shm_size is not a size.
    """
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


def service_ports(profile: Profile) -> list[dict[str, Any]]:
    """Return a Service's one port: `deploy.port` onto the containers' `http` port."""
    return [{"name": "http", "port": profile.deploy.port, "targetPort": "http", "protocol": "TCP"}]


def k8s_quantity(size: str) -> str:
    """Return a docker-style size (`16g`, `512MiB`, `1.5GB`) as a Kubernetes quantity.

    Units are binary, as docker reads them.

    Example:
        `k8s_quantity("16g")` is `"16Gi"`; `k8s_quantity("1.5g")` is `"1536Mi"`.

    Raises:
        ConfigError: the text is not a size.
    """
    match = _SIZE.fullmatch(size.strip())
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


def namespace(profile: Profile) -> str:
    """Return deploy.namespace after checking it is a DNS-1123 label.

    Raises:
        ConfigError: the namespace is not a Kubernetes namespace name.
    """
    value = profile.deploy.namespace
    if not _DNS_LABEL.fullmatch(value):
        raise ConfigError(
            f"deploy.namespace {value!r} is not a Kubernetes namespace name",
            fix="use up to 63 lowercase letters, digits and '-', starting and ending alphanumeric",
        )
    return value


def escape(text: str) -> str:
    """Return text with each `$` doubled, so Kubernetes passes it on as one literal `$`."""
    return text.replace("$", "$$")


def _volume_mounts(profile: Profile) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": SHM_MOUNT_PATH}]
    if profile.deploy.host_model_dir is not None:
        mounts.append(
            {"name": "models", "mountPath": profile.deploy.container_model_dir, "readOnly": True}
        )
    return mounts
