"""Kubernetes manifests of a profile (core): a Deployment and a ClusterIP Service.

A profile spanning several nodes renders as a LeaderWorkerSet instead (`lws.py`).
Arguments are a YAML list (no shell). Kubernetes expands `$(VAR)` in `args` and
env values, so each `$` there is written `$$`, which it turns back into `$`.
Variables in `secret_env` come from a Secret the user creates (the header says
how); the manifests hold only their names. On a CPU host no GPU is requested.
The startup probe allows `deploy.startup_timeout_s` for loading (a 427B model
takes ten minutes or more) before the liveness probe may restart the pod.
"""

from __future__ import annotations

from typing import Any

import yaml

from servekit.profiles.schema import Profile
from servekit.render import shell
from servekit.render._k8s_pod import (
    app_labels,
    app_selector,
    engine_container,
    k8s_quantity,
    object_metadata,
    pod_volumes,
    secret_notes,
    service_ports,
)
from servekit.render.argv import vllm_serve_args
from servekit.render.container import header_lines, resource_name
from servekit.render.lws import lws_documents, render_lws

__all__ = ["k8s_documents", "k8s_quantity", "render_k8s"]


def k8s_documents(profile: Profile) -> list[dict[str, Any]]:
    """Return the manifests as data: a Deployment and a Service for one node.

    A profile spanning several nodes gives `lws.lws_documents` instead.

    Raises:
        ConfigError: invalid namespace, shm size, env name or multi-node layout.
    """
    if profile.hardware.nodes > 1:
        return lws_documents(profile)
    name = resource_name(profile)
    container = engine_container(
        profile,
        name="vllm",
        command=["vllm", "serve"],
        args=[profile.model.path, *vllm_serve_args(profile)],
        serves_http=True,
    )
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(profile, name),
        "spec": {
            "replicas": 1,
            # A rolling update would start a second engine beside the first: twice the GPUs.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": app_selector(name)},
            "template": {
                "metadata": {"labels": app_labels(name)},
                "spec": {"containers": [container], "volumes": pod_volumes(profile)},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(profile, name),
        "spec": {
            "type": "ClusterIP",
            "selector": app_selector(name),
            "ports": service_ports(profile),
        },
    }
    return [deployment, service]


def render_k8s(profile: Profile) -> str:
    """Return the manifests as multi-document YAML for `kubectl apply -f`.

    A profile spanning several nodes gives `lws.render_lws` instead.

    Raises:
        ConfigError: invalid namespace, shm size, env name or multi-node layout.
    """
    if profile.hardware.nodes > 1:
        return render_lws(profile)
    body = yaml.safe_dump_all(
        k8s_documents(profile), sort_keys=False, explicit_start=True, width=1_000_000
    )
    notes = [*header_lines(profile), *secret_notes(profile)]
    return "\n".join([*shell.comments(notes), body])
