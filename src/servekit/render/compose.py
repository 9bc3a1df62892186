"""The docker compose file of a profile (core).

The command is a YAML list, so no shell ever parses it, and `yaml.safe_dump`
quotes every value that needs it. Compose itself still interpolates `$VAR` in
every string, so each `$` is written as `$$` and arrives as a literal `$`.
"""

from __future__ import annotations

from typing import Any

import yaml

from servekit.profiles.schema import Profile
from servekit.render import shell
from servekit.render._container import (
    CONTAINER_PORT,
    HEALTH_PATH,
    gpu_count,
    header_lines,
    image,
    model_volume,
    published_port,
    resource_name,
)
from servekit.render.argv import environment, vllm_serve_args

HEALTHCHECK_INTERVAL_S = 30
HEALTHCHECK_TIMEOUT_S = 10
HEALTHCHECK_RETRIES = 3


def compose_document(profile: Profile) -> dict[str, Any]:
    """Return the compose file as data: one service named after the profile.

    The health check's start period is `deploy.startup_timeout_s`, so a model that
    takes many minutes to load is not reported unhealthy while it loads.

    Raises:
        ConfigError: the profile spans several nodes, or an env name is invalid.
    """
    name = resource_name(profile)
    shm = profile.deploy.shm_size
    service: dict[str, Any] = {
        "image": image(profile),
        "container_name": name,
        "command": [profile.model.path, *vllm_serve_args(profile)],
    }
    env = environment(profile)
    if env:
        service["environment"] = env
    service["ports"] = [published_port(profile)]
    volume = model_volume(profile)
    if volume is not None:
        service["volumes"] = [volume]
    if shm is None:
        service["ipc"] = "host"
    else:
        service["shm_size"] = shm
    service["deploy"] = {
        "resources": {
            "reservations": {
                "devices": [
                    {"driver": "nvidia", "count": gpu_count(profile), "capabilities": ["gpu"]}
                ]
            }
        }
    }
    service["healthcheck"] = {
        "test": ["CMD", "curl", "-fsS", f"http://localhost:{CONTAINER_PORT}{HEALTH_PATH}"],
        "interval": f"{HEALTHCHECK_INTERVAL_S}s",
        "timeout": f"{HEALTHCHECK_TIMEOUT_S}s",
        "retries": HEALTHCHECK_RETRIES,
        "start_period": f"{profile.deploy.startup_timeout_s}s",
    }
    return {"services": {name: _escape_interpolation(service)}}


def render_compose(profile: Profile) -> str:
    """Return a `compose.yaml` for the profile, with a header comment.

    Raises:
        ConfigError: the profile spans several nodes, or an env name is invalid.
    """
    body = yaml.safe_dump(compose_document(profile), sort_keys=False, width=1_000_000)
    return "\n".join([*shell.comments(header_lines(profile)), body])


def _escape_interpolation(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {key: _escape_interpolation(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_escape_interpolation(item) for item in value]
    return value
