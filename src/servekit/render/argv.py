"""The `vllm serve` argument list of a profile (core): mechanical, flag by flag.

Every target (a shell command, docker, compose, Kubernetes, a launch script) starts
from the flag groups built here, so the engine sees the same arguments whichever
way it is launched. A flag group is one flag with its value, if it has one; the
renderers put one group on each line.
"""

from __future__ import annotations

import re

from servekit import jsontext
from servekit.errors import ConfigError
from servekit.profiles.schema import Profile, ServeArgs

FlagGroup = tuple[str, ...]
"""One flag and its value (`("--block-size", "128")`) or a bare flag (`("--enforce-eager",)`)."""

_FLAG_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_BACKEND_FLAG = "distributed-executor-backend"

# Flags servekit writes itself: an extra_args entry with one of these names would either
# duplicate a typed field or fight the port and address the rendered targets publish.
_OWNED_ELSEWHERE: dict[str, str] = {
    "host": "set deploy.bind_host instead",
    "port": "set deploy.port instead",
    "model": "set model.path instead",
    "speculative-config": "set speculative.config instead",
}


def vllm_serve_flags(profile: Profile) -> list[FlagGroup]:
    """Return the profile's `vllm serve` flags, grouped one flag with its value per group.

    Typed serve arguments come first in declaration order, then `extra_args` in the
    order written, then `--distributed-executor-backend ray` for a profile spanning
    several nodes, then `--speculative-config`. A typed argument is rendered only when
    the profile set it (or it is required, like `max_model_len`), so vLLM's own
    defaults stay in charge of everything the profile did not decide.

    Raises:
        ConfigError: an `extra_args` name is malformed or belongs to a typed field, or
            a multi-node profile's layout or executor backend cannot run over Ray.
    """
    args = profile.serve_args
    groups: list[FlagGroup] = []
    for name, field in ServeArgs.model_fields.items():
        if name == "extra_args":
            continue
        if name not in args.model_fields_set and not field.is_required():
            continue
        value = getattr(args, name)
        if value is not None:
            groups.append(_flag_group(_kebab(name), value))
    for raw_name, value in args.extra_args.items():
        name = _extra_flag_name(raw_name)
        if value is not None:
            groups.append(_flag_group(name, value))
    if profile.hardware.nodes > 1:
        groups += _multi_node_flags(profile)
    if profile.speculative is not None:
        config = profile.speculative.config.model_dump(mode="json", exclude_none=True)
        groups.append(("--speculative-config", _compact_json(config)))
    return groups


def vllm_serve_args(profile: Profile) -> list[str]:
    """Return the flags of `vllm serve` for a profile, without `vllm serve` and the model.

    Example:
        For `minimax-m3-mxfp8-8xa800` this starts `["--block-size", "128",
        "--max-model-len", "131072", ...]` and ends with `"--speculative-config",
        '{"method":"eagle3",...}'`; JSON values are one compact element each.
    """
    return [word for group in vllm_serve_flags(profile) for word in group]


def host_flags(profile: Profile) -> list[FlagGroup]:
    """Return `--host` and `--port` for an engine that listens directly on the host."""
    return [("--host", profile.deploy.bind_host), ("--port", str(profile.deploy.port))]


def vllm_serve_command(profile: Profile) -> list[str]:
    """Return the engine command for a host process, bound to `deploy.bind_host`.

    `["vllm", "serve", <model path>, "--host", <bind_host>, "--port", <port>, *flags]`:
    without `--host` vLLM listens on every interface.
    """
    hosts = [word for group in host_flags(profile) for word in group]
    return ["vllm", "serve", profile.model.path, *hosts, *vllm_serve_args(profile)]


def environment(profile: Profile) -> dict[str, str]:
    """Return the engine's environment variables (names are checked by the schema)."""
    return dict(profile.env)


def _check_multi_node_layout(profile: Profile) -> None:
    """Check a multi-node profile's parallel layout is the one servekit launches.

    Tensor parallel stays inside a node (NVLink) and pipeline stages span the
    nodes, so each pod or host holds `gpus_per_node` GPUs of one stage.

    Raises:
        ConfigError: tensor_parallel_size is not gpus_per_node, pipeline_parallel_size
            is not nodes, or data_parallel_size is above 1.
    """
    hardware = profile.hardware
    args = profile.serve_args
    layout = (args.tensor_parallel_size, args.pipeline_parallel_size or 1)
    if layout != (hardware.gpus_per_node, hardware.nodes) or (args.data_parallel_size or 1) > 1:
        raise ConfigError(
            f"profile {profile.name} spans {hardware.nodes} nodes x {hardware.gpus_per_node} "
            f"GPUs with tensor_parallel_size {layout[0]}, pipeline_parallel_size {layout[1]} "
            f"and data_parallel_size {args.data_parallel_size or 1}; multi-node launches "
            "keep tensor parallel inside a node and put one pipeline stage on each node",
            fix=f"set tensor_parallel_size {hardware.gpus_per_node}, pipeline_parallel_size "
            f"{hardware.nodes} and no data_parallel_size",
        )


def _multi_node_flags(profile: Profile) -> list[FlagGroup]:
    _check_multi_node_layout(profile)
    extra = profile.serve_args.extra_args
    written = {_extra_flag_name(raw): value for raw, value in extra.items()}.get(_BACKEND_FLAG)
    if written is None:
        return [(f"--{_BACKEND_FLAG}", "ray")]
    if written != "ray":
        raise ConfigError(
            f"serve_args.extra_args sets {_BACKEND_FLAG} {written!r}, but profile "
            f"{profile.name} spans {profile.hardware.nodes} nodes and is launched over Ray",
            fix=f"remove {_BACKEND_FLAG} from extra_args; servekit renders "
            f"--{_BACKEND_FLAG} ray for multi-node profiles",
        )
    return []  # already rendered from extra_args


def _flag_group(name: str, value: object) -> FlagGroup:
    if isinstance(value, bool):
        return (f"--{name}",) if value else (f"--no-{name}",)
    if isinstance(value, dict | list):
        return (f"--{name}", _compact_json(value))
    if isinstance(value, float):
        return (f"--{name}", repr(value))
    text = str(value)
    if text.startswith("-"):
        # argparse would read a separate "-x" as an option; "--flag=-x" is unambiguous.
        return (f"--{name}={text}",)
    return (f"--{name}", text)


def _compact_json(value: object) -> str:
    return jsontext.dumps(value, separators=(",", ":"), ensure_ascii=True, what="a JSON flag")


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def _extra_flag_name(raw_name: str) -> str:
    name = _kebab(raw_name.lstrip("-"))
    if not _FLAG_NAME.fullmatch(name):
        raise ConfigError(
            f"serve_args.extra_args: {raw_name!r} is not a vLLM flag name",
            fix="write the flag's name as vLLM spells it, e.g. disable-log-requests",
        )
    fix = _OWNED_ELSEWHERE.get(name)
    snake = name.replace("-", "_")
    if fix is None and snake in ServeArgs.model_fields and snake != "extra_args":
        fix = f"set serve_args.{snake} instead"
    if fix is not None:
        raise ConfigError(f"serve_args.extra_args: {raw_name!r} is not allowed here", fix=fix)
    return name
