"""Kubernetes manifests of a multi-node profile (core): a LeaderWorkerSet and a Service.

One group of `hardware.nodes` pods, one pipeline stage of `gpus_per_node` GPUs in
each. The leader starts the Ray head, waits until every node's GPUs joined, then
runs `vllm serve` with the Ray executor and serves the API; each worker joins the
head at `$LWS_LEADER_ADDRESS`, which the LeaderWorkerSet controller injects along
with `$LWS_GROUP_SIZE`. A ClusterIP Service selects the leader pod.

Containers run `bash -c SCRIPT`. Every value in the script is shell-quoted, then
every `$` is doubled, because Kubernetes expands `$(VAR)` in `args` before bash
sees them; `$$` reaches bash as `$`.
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
    object_metadata,
    pod_volumes,
    secret_notes,
    service_ports,
)
from servekit.render._ray import head_start_words, join_ray_function, wait_for_gpus_function
from servekit.render.argv import vllm_serve_flags
from servekit.render.container import header_lines, resource_name

API_VERSION = "leaderworkerset.x-k8s.io/v1"
ROLE_LABEL = "role"
SHELL_COMMAND = ("bash", "-c")


def lws_documents(profile: Profile) -> list[dict[str, Any]]:
    """Return the LeaderWorkerSet and the leader's Service as data.

    Raises:
        ConfigError: invalid namespace, shm size or env name, or a parallel layout
            other than TP = gpus_per_node and PP = nodes.
    """
    name = resource_name(profile)
    script = {"leader": leader_script(profile), "worker": worker_script(profile)}
    containers = {
        role: engine_container(
            profile,
            name="vllm" if role == "leader" else "ray-worker",
            command=SHELL_COMMAND,
            args=[text],
            serves_http=role == "leader",
        )
        for role, text in script.items()
    }

    def template(role: str) -> dict[str, Any]:
        return {
            "metadata": {"labels": app_labels(name) | {ROLE_LABEL: role}},
            "spec": {"containers": [containers[role]], "volumes": pod_volumes(profile)},
        }

    leader_worker_set = {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": object_metadata(profile, name),
        "spec": {
            "replicas": 1,
            # Workers start with the leader: under LeaderReady they would wait for a leader
            # that only becomes ready once they have joined.
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": profile.hardware.nodes,
                # One lost pipeline stage stops the engine; restart the group together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template("leader"),
                "workerTemplate": template("worker"),
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(profile, name),
        "spec": {
            "type": "ClusterIP",
            "selector": app_selector(name) | {ROLE_LABEL: "leader"},
            "ports": service_ports(profile),
        },
    }
    return [leader_worker_set, service]


def render_lws(profile: Profile) -> str:
    """Return the manifests as multi-document YAML for `kubectl apply -f`.

    Container scripts are written as YAML literal blocks, so they read as scripts.

    Raises:
        ConfigError: as `lws_documents`.
    """
    body = yaml.dump_all(
        lws_documents(profile),
        Dumper=_ScriptDumper,
        sort_keys=False,
        explicit_start=True,
        width=1_000_000,
    )
    hardware = profile.hardware
    notes = [
        *header_lines(profile),
        f"Multi-node: a LeaderWorkerSet group of {hardware.nodes} pods with "
        f"{hardware.gpus_per_node} GPUs each (tensor parallel inside a pod, one pipeline "
        "stage per pod), vLLM over Ray.",
        f"Needs the LeaderWorkerSet controller ({API_VERSION}) installed in the cluster.",
        *secret_notes(profile),
    ]
    return "\n".join([*shell.comments(notes), body])


def leader_script(profile: Profile) -> str:
    """Return the leader's bash script: Ray head, wait for every pod's GPUs, `vllm serve`.

    The engine listens on its container's default port, as in the single-node
    Deployment; the GPUs waited for are `$LWS_GROUP_SIZE` x `gpus_per_node`.

    Raises:
        ConfigError: the profile's flags cannot be rendered for several nodes.
    """
    want = f'"$((LWS_GROUP_SIZE * {profile.hardware.gpus_per_node}))"'
    head = ["exec", "vllm", "serve", profile.model.path]
    groups = vllm_serve_flags(profile)
    lines = [
        "set -euo pipefail",
        *wait_for_gpus_function(profile),
        shell.quote_words(head_start_words()),
        f"wait_for_gpus {want}",
        *shell.literal_values_directive([*head, *(word for group in groups for word in group)]),
        shell.continued(shell.command_lines(head, groups)),
    ]
    return "\n".join(lines) + "\n"


def worker_script(profile: Profile) -> str:
    """Return a worker's bash script: join the Ray head at `$LWS_LEADER_ADDRESS` and block."""
    lines = [
        "set -euo pipefail",
        *join_ray_function(profile),
        'join_ray "$LWS_LEADER_ADDRESS"',
    ]
    return "\n".join(lines) + "\n"


class _ScriptDumper(yaml.SafeDumper):
    """A safe dumper that writes multi-line strings as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ScriptDumper.add_representer(str, _represent_str)
