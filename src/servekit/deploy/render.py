"""Render a profile as one launch artifact, chosen by target name (core).

| target  | artifact                                                |
|---------|---------------------------------------------------------|
| vllm    | the `vllm serve` command for a shell prompt             |
| docker  | a `docker run` command                                  |
| compose | a docker compose file                                   |
| k8s     | a Kubernetes Deployment and Service                     |
| script  | a bash launch script                                    |
"""

from __future__ import annotations

from collections.abc import Callable

from servekit.deploy._container import gpu_count
from servekit.deploy.compose import render_compose
from servekit.deploy.docker import render_docker_run
from servekit.deploy.k8s import render_k8s
from servekit.deploy.script import render_command, render_script
from servekit.errors import UsageError
from servekit.profiles.schema import Profile

TARGETS = ("vllm", "docker", "compose", "k8s", "script")
"""Target names `render` accepts, in the order help text lists them."""

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
        ConfigError: the profile cannot be rendered (multi-node, invalid names).
    """
    renderer = _RENDERERS.get(target)
    if renderer is None:
        raise UsageError(
            f"unknown render target {target!r}", fix=f"use one of: {', '.join(TARGETS)}"
        )
    gpu_count(profile)  # every target launches one node's engine; refuse multi-node alike
    return renderer(profile)
