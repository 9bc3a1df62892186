"""The `docker run` command of a profile (core).

The vllm/vllm-openai image's entrypoint is `vllm serve`, so the command passes the
model path and the flags straight after the image. With `deploy.network: bridge` (the
default) the engine listens on port 8000 inside the container and `-p` publishes it on
`deploy.bind_host:deploy.port`; with `host` the container shares the host's network, so
nothing is published and the engine itself listens on `bind_host:port`.

A CPU host (the catalog's `cpu` device) reserves no GPUs: docker refuses `--gpus`
where no GPU driver is installed. Each `secret_env` variable is passed by name only
(`-e NAME`): docker takes its value from its own environment, so the value is on no
command line and in no artifact.
"""

from __future__ import annotations

from servekit.profiles.schema import Profile
from servekit.render import shell
from servekit.render.argv import FlagGroup, environment, host_flags, vllm_serve_flags
from servekit.render.container import (
    gpu_count,
    header_lines,
    image,
    model_volume,
    published_port,
    resource_name,
    secret_lines,
    uses_gpus,
)


def docker_run_options(profile: Profile, *, env_values: bool = True) -> list[FlagGroup]:
    """Return the `docker run` options, one option with its value per group.

    With `env_values=False` each variable is passed as `-e NAME` (docker takes the value
    from its own environment), so a launch never puts a value on a command line. Secret
    variables are passed that way always.

    `--ipc=host` gives NCCL and vLLM's workers the shared memory they need between
    tensor-parallel ranks; a profile that sets `deploy.shm_size` gets a private
    `/dev/shm` of that size instead.

    Raises:
        ConfigError: the profile spans several nodes, an env name is invalid, or the
            profile's GPU is not in the catalog.
    """
    gpus = gpu_count(profile)  # one container holds one node's engine; refuse multi-node early
    shm = profile.deploy.shm_size
    groups: list[FlagGroup] = [("--name", resource_name(profile))]
    if uses_gpus(profile):
        groups.append(("--gpus", str(gpus)))
    groups.append(("--ipc=host",) if shm is None else ("--shm-size", shm))
    if profile.deploy.network == "host":
        groups.append(("--network", "host"))
    else:
        groups.append(("-p", published_port(profile)))
    volume = model_volume(profile)
    if volume is not None:
        groups.append(("-v", volume))
    groups += [
        ("-e", f"{name}={value}" if env_values else name)
        for name, value in environment(profile).items()
    ]
    groups += [("-e", name) for name in profile.secret_env]
    return groups


def docker_engine_flags(profile: Profile) -> list[FlagGroup]:
    """Return the engine's flags after the image and the model path: `vllm serve`'s flags,
    led by `--host` and `--port` when the container shares the host's network."""
    hosts = host_flags(profile) if profile.deploy.network == "host" else []
    return [*hosts, *vllm_serve_flags(profile)]


def render_docker_run(profile: Profile) -> str:
    """Return a `docker run` command, one option or flag per line, every value quoted.

    Raises:
        ConfigError: the profile spans several nodes, or an env name is invalid.
    """
    groups = [
        *docker_run_options(profile),
        (image(profile),),
        (profile.model.path,),
        *docker_engine_flags(profile),
    ]
    lines = shell.command_lines(["docker", "run"], groups)
    notes = [*header_lines(profile), *secret_lines(profile)]
    return "\n".join([*shell.comments(notes), shell.continued(lines)]) + "\n"
