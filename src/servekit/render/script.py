"""Host launch commands (core): the bare `vllm serve` command and bash launch scripts.

All run the engine as a process on the host, so all pass `--host` and `--port`
from the profile's deploy section: vLLM alone would listen on every interface,
and `deploy.bind_host` exists to keep it on loopback unless the profile says so.
A profile spanning several nodes gets a Ray launch script taking a role: `head`
on one host, `worker HEAD_ADDRESS` on each of the others.

A `secret_env` variable is never in a script: the script requires it in the
environment it runs in (and stops, naming it, when it is unset or empty) and
exports it to the engine without ever printing it.
"""

from __future__ import annotations

from servekit.profiles.schema import Profile
from servekit.render import shell
from servekit.render._ray import (
    RAY_PORT,
    head_start_words,
    join_ray_function,
    wait_for_gpus_function,
)
from servekit.render.argv import environment, host_flags, vllm_serve_flags
from servekit.render.container import header_lines

_CASE_INDENT = "    "  # the body of a `case` branch in the Ray script


def render_command(profile: Profile) -> str:
    """Return the engine command for a shell prompt, with no comments.

    Environment assignments come first, one per line, as a prefix of the command
    (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 \\`), then `vllm serve <model>` and
    one flag per line.
    """
    prefix = [shell.assignment(name, value) for name, value in environment(profile).items()]
    lines = shell.command_lines(
        ["vllm", "serve", profile.model.path],
        [*host_flags(profile), *vllm_serve_flags(profile)],
    )
    return shell.continued([*prefix, *lines]) + "\n"


def render_script(profile: Profile) -> str:
    """Return a bash script that launches the engine in the foreground with `exec`.

    The script stops at the first failing command (`set -euo pipefail`), exports the
    profile's environment, requires each `secret_env` variable set, and replaces itself
    with `vllm serve`, so signals from a supervisor reach the engine. Paths are as the
    engine sees them; the header says where they live on the host when the profile
    mounts a model directory. A profile spanning several nodes gives
    `render_ray_script` instead.

    Raises:
        ConfigError: a multi-node profile's layout or flags cannot run over Ray.
    """
    if profile.hardware.nodes > 1:
        return render_ray_script(profile)
    directive, serve = _serve_lines(profile)
    lines = [*_preamble(profile, _notes(profile)), *directive, shell.continued(serve)]
    return "\n".join(lines) + "\n"


def render_ray_script(profile: Profile) -> str:
    """Return a bash script that launches one node of a multi-node engine over Ray.

    `SCRIPT head` starts the Ray head, waits until `nodes x gpus_per_node` GPUs have
    joined (at most `deploy.startup_timeout_s`), then replaces itself with
    `vllm serve` using the Ray executor. `SCRIPT worker HEAD_ADDRESS` joins the head
    and blocks. Any other arguments print the usage and exit 2.

    Raises:
        ConfigError: the profile's layout or flags cannot run over Ray.
    """
    hardware = profile.hardware
    want_gpus = hardware.nodes * hardware.gpus_per_node
    others = "the other host" if hardware.nodes == 2 else f"each of the {hardware.nodes - 1} others"
    notes = [
        *_notes(profile),
        f"Multi-node over Ray: {hardware.nodes} hosts x {hardware.gpus_per_node} GPUs. Run "
        f"`SCRIPT head` on one host, then `SCRIPT worker HEAD_ADDRESS` on {others}; "
        f"workers reach the head on port {RAY_PORT}.",
    ]
    # Indent whole lines only: a quoted value may itself span lines.
    directive, serve_lines = _serve_lines(profile)
    serve = [
        *(_CASE_INDENT + line for line in directive),
        shell.continued([_CASE_INDENT + line for line in serve_lines]),
    ]
    lines = [
        *_preamble(profile, notes),
        "usage() {",
        '  echo "usage: $0 head | $0 worker HEAD_ADDRESS" >&2',
        "  exit 2",
        "}",
        "",
        *wait_for_gpus_function(profile),
        "",
        *join_ray_function(profile),
        "",
        'case "${1-}" in',
        "  head)",
        "    [[ $# -eq 1 ]] || usage",
        f"    {shell.quote_words(head_start_words())}",
        f"    wait_for_gpus {want_gpus}",
        *serve,
        "    ;;",
        "  worker)",
        "    [[ $# -eq 2 && -n $2 ]] || usage",
        '    join_ray "$2"',
        "    ;;",
        "  *)",
        "    usage",
        "    ;;",
        "esac",
    ]
    return "\n".join(lines) + "\n"


def _notes(profile: Profile) -> list[str]:
    notes = header_lines(profile)
    deploy = profile.deploy
    if deploy.host_model_dir is not None:
        notes.append(
            f"Model paths are as the engine container sees them: {deploy.container_model_dir} "
            f"is {deploy.host_model_dir} on the host."
        )
    return notes


def _preamble(profile: Profile, notes: list[str]) -> list[str]:
    """Return the shebang, header comments, strict mode, the profile's exports and the
    checks that its secrets are set."""
    lines = ["#!/usr/bin/env bash", *shell.comments(notes), "set -euo pipefail", ""]
    env = environment(profile)
    if env:
        for name, value in env.items():
            lines += shell.literal_values_directive([value])
            lines.append(f"export {shell.assignment(name, value)}")
        lines.append("")
    if profile.secret_env:
        lines += [secret_check(name) for name in profile.secret_env]
        lines.append(f"export {' '.join(profile.secret_env)}")
        lines.append("")
    return lines


def secret_check(name: str) -> str:
    """Return the bash line that stops the script when the secret variable `name` is unset
    or empty; bash's message names the variable, never a value.

    Example:
        `secret_check("HF_TOKEN")` is
        `: "${HF_TOKEN:?is not set; export HF_TOKEN (secret_env) before running this script}"`.
    """
    return f': "${{{name}:?is not set; export {name} (secret_env) before running this script}}"'


def _serve_lines(profile: Profile) -> tuple[list[str], list[str]]:
    """Return the shellcheck directive the `exec vllm serve` command needs (if any) and
    the command's lines, one per flag group, not yet joined."""
    head = ["exec", "vllm", "serve", profile.model.path]
    groups = [*host_flags(profile), *vllm_serve_flags(profile)]
    directive = shell.literal_values_directive([*head, *(w for g in groups for w in g)])
    return directive, shell.command_lines(head, groups)
