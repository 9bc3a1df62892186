"""Render a profile as one launch artifact, chosen by target name (core).

| target  | one node (`hardware.nodes: 1`)              | several nodes                      |
|---------|---------------------------------------------|------------------------------------|
| vllm    | the `vllm serve` command for a shell prompt | refused                            |
| docker  | a `docker run` command                      | refused                            |
| compose | a docker compose file                       | refused                            |
| k8s     | a Kubernetes Deployment and Service         | a LeaderWorkerSet and Service      |
| script  | a bash launch script                        | a Ray launch script (head, worker) |
"""

from __future__ import annotations

from collections.abc import Callable

from servekit.errors import UsageError
from servekit.names import TARGETS
from servekit.profiles.schema import Profile
from servekit.render.compose import render_compose
from servekit.render.container import MULTI_NODE_TARGETS, multi_node_error
from servekit.render.docker import render_docker_run
from servekit.render.k8s import render_k8s
from servekit.render.script import render_command, render_script

_RENDERERS: dict[str, Callable[[Profile], str]] = {
    "vllm": render_command,
    "docker": render_docker_run,
    "compose": render_compose,
    "k8s": render_k8s,
    "script": render_script,
}


def render(profile: Profile, target: str) -> str:
    """Return the profile rendered as the named target's text, ending in a newline.

    Args:
        profile: a validated profile.
        target: one of `TARGETS`.

    Raises:
        UsageError: the target is not one of `TARGETS`.
        ConfigError: the profile cannot be rendered (multi-node on a single-node
            target, a multi-node layout other than TP per node x PP across nodes,
            invalid names).
    """
    renderer = _RENDERERS.get(target)
    if renderer is None:
        raise UsageError(
            f"unknown render target {target!r}", fix=f"use one of: {', '.join(TARGETS)}"
        )
    if profile.hardware.nodes > 1 and target not in MULTI_NODE_TARGETS:
        raise multi_node_error(profile, f"--target {target}")
    return renderer(profile)
