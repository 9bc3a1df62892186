"""The docker compose file of a profile (core).

The command is a YAML list, so no shell ever parses it, and `yaml.safe_dump`
quotes every value that needs it. Compose itself still interpolates `$VAR` in
every string, so each `$` is written as `$$` and arrives as a literal `$`.

A `secret_env` variable is listed by name only, so compose passes it through from
the environment `docker compose up` runs in and no value is ever in the file. With
`deploy.network: host` the container shares the host's network: nothing is
published, and the engine itself listens on `deploy.bind_host:deploy.port`.
"""

from __future__ import annotations

from typing import Any

import yaml

from servekit.profiles.schema import Profile
from servekit.render import shell
from servekit.render.argv import environment, host_flags, vllm_serve_args
from servekit.render.container import (
    CONTAINER_PORT,
    HEALTH_PATH,
    gpu_count,
    header_lines,
    image,
    model_volume,
    published_port,
    resource_name,
    uses_gpus,
)

HEALTHCHECK_INTERVAL_S = 30
HEALTHCHECK_TIMEOUT_S = 10
HEALTHCHECK_RETRIES = 3


def compose_document(profile: Profile) -> dict[str, Any]:
    """Return the compose file as data: one service named after the profile.

    The health check's start period is `deploy.startup_timeout_s`, so a model that
    takes many minutes to load is not reported unhealthy while it loads.

    Raises:
        ConfigError: the profile spans several nodes, its GPU is not in the catalog,
            or an env name is invalid.
    """
    name = resource_name(profile)
    shm = profile.deploy.shm_size
    host_network = profile.deploy.network == "host"
    hosts = [word for group in host_flags(profile) for word in group] if host_network else []
    service: dict[str, Any] = {
        "image": image(profile),
        "container_name": name,
        "command": [profile.model.path, *hosts, *vllm_serve_args(profile)],
    }
    env = environment(profile)
    if profile.secret_env:
        # The list form is the one that can name a variable without a value.
        service["environment"] = [
            *(f"{key}={value}" for key, value in env.items()),
            *profile.secret_env,
        ]
    elif env:
        service["environment"] = env
    if host_network:
        service["network_mode"] = "host"
    else:
        service["ports"] = [published_port(profile)]
    volume = model_volume(profile)
    if volume is not None:
        service["volumes"] = [volume]
    if shm is None:
        service["ipc"] = "host"
    else:
        service["shm_size"] = shm
    gpus = gpu_count(profile)  # one container holds one node's engine; refuse multi-node
    if uses_gpus(profile):
        service["deploy"] = {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "count": gpus, "capabilities": ["gpu"]}]
                }
            }
        }
    service["healthcheck"] = {
        "test": ["CMD", "curl", "-fsS", health_url(profile)],
        "interval": f"{HEALTHCHECK_INTERVAL_S}s",
        "timeout": f"{HEALTHCHECK_TIMEOUT_S}s",
        "retries": HEALTHCHECK_RETRIES,
        "start_period": f"{profile.deploy.startup_timeout_s}s",
    }
    return {"services": {name: _escape_interpolation(service)}}


def health_url(profile: Profile) -> str:
    """Return the URL the health check polls from inside the container.

    On a bridge network that is the engine's own port 8000 on localhost; with
    `deploy.network: host` it is `deploy.port` on `deploy.bind_host`, or on loopback
    when the engine binds every interface (`0.0.0.0`, `::`).
    """
    if profile.deploy.network != "host":
        return f"http://localhost:{CONTAINER_PORT}{HEALTH_PATH}"
    # An engine bound to every interface is reached on loopback; nothing here binds.
    loopback = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104
    host = loopback.get(profile.deploy.bind_host, profile.deploy.bind_host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{profile.deploy.port}{HEALTH_PATH}"


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
