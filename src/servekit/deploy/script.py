"""Host launch commands (core): the bare `vllm serve` command and a bash launch script.

Both run the engine as a process on the host, so both pass `--host` and `--port`
from the profile's deploy section: vLLM alone would listen on every interface,
and `deploy.bind_host` exists to keep it on loopback unless the profile says so.
"""

from __future__ import annotations

from servekit.deploy import shell
from servekit.deploy._container import header_lines
from servekit.deploy.argv import environment, host_flags, vllm_serve_flags
from servekit.profiles.schema import Profile


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
    profile's environment, and replaces itself with `vllm serve`, so signals from a
    supervisor reach the engine. Paths are as the engine sees them; the header says
    where they live on the host when the profile mounts a model directory.
    """
    env = environment(profile)
    notes = header_lines(profile)
    deploy = profile.deploy
    if deploy.host_model_dir is not None:
        notes.append(
            f"Model paths are as the engine container sees them: {deploy.container_model_dir} "
            f"is {deploy.host_model_dir} on the host."
        )
    lines = [
        "#!/usr/bin/env bash",
        *shell.comments(notes),
        "set -euo pipefail",
        "",
    ]
    if env:
        lines += [f"export {shell.assignment(name, value)}" for name, value in env.items()]
        lines.append("")
    command = shell.command_lines(
        ["exec", "vllm", "serve", profile.model.path],
        [*host_flags(profile), *vllm_serve_flags(profile)],
    )
    lines.append(shell.continued(command))
    return "\n".join(lines) + "\n"
