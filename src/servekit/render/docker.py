"""The `docker run` command of a profile (core).

The vllm/vllm-openai image's entrypoint is `vllm serve`, so the command passes the
model path and the flags straight after the image. The engine listens on port
8000 inside the container; `-p` publishes it on `deploy.bind_host:deploy.port`.
"""

from __future__ import annotations

from servekit.profiles.schema import Profile
from servekit.render import shell
from servekit.render._container import (
    gpu_count,
    header_lines,
    image,
    model_volume,
    published_port,
    resource_name,
)
from servekit.render.argv import FlagGroup, environment, vllm_serve_flags


def docker_run_options(profile: Profile, *, env_values: bool = True) -> list[FlagGroup]:
    """Return the `docker run` options, one option with its value per group.

    With `env_values=False` each variable is passed as `-e NAME` (docker takes the value
    from its own environment), so a launch never puts a value on a command line.

    `--ipc=host` gives NCCL and vLLM's workers the shared memory they need between
    tensor-parallel ranks; a profile that sets `deploy.shm_size` gets a private
    `/dev/shm` of that size instead.

    Raises:
        ConfigError: the profile spans several nodes, or an env name is invalid.
    """
    gpu_count(profile)  # one container holds one node's engine; refuse multi-node early
    shm = profile.deploy.shm_size
    groups: list[FlagGroup] = [
        ("--name", resource_name(profile)),
        ("--gpus", str(gpu_count(profile))),
        ("--ipc=host",) if shm is None else ("--shm-size", shm),
        ("-p", published_port(profile)),
    ]
    volume = model_volume(profile)
    if volume is not None:
        groups.append(("-v", volume))
    groups += [
        ("-e", f"{name}={value}" if env_values else name)
        for name, value in environment(profile).items()
    ]
    return groups


def render_docker_run(profile: Profile) -> str:
    """Return a `docker run` command, one option or flag per line, every value quoted.

    Raises:
        ConfigError: the profile spans several nodes, or an env name is invalid.
    """
    groups = [
        *docker_run_options(profile),
        (image(profile),),
        (profile.model.path,),
        *vllm_serve_flags(profile),
    ]
    lines = shell.command_lines(["docker", "run"], groups)
    return "\n".join([*shell.comments(header_lines(profile)), shell.continued(lines)]) + "\n"
