"""The docker CLI as `servekit up/down/status/logs` use it (shell).

Every call is an argument list (no shell) with a time bound, except an image pull, which
takes as long as the registry does and streams its progress to stderr. ADR 0006 says why
the CLI and not the SDK.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Mapping

from servekit.errors import LaunchError

DOCKER_TIMEOUT_S = 60
"""Bound on one docker call that does no transfer (run of a present image, inspect, rm)."""

_GONE = ("No such container", "No such object")
_CONFLICT = "is already in use by container"
_HINT = re.compile(r"(?:Run|See) '[^']*--help'.*")


def docker_cli() -> str:
    """The docker executable.

    Raises:
        LaunchError: docker is not on PATH.
    """
    docker = shutil.which("docker")
    if docker is None:
        raise LaunchError("docker is not installed", fix="install Docker, or use --runtime process")
    return docker


def docker(
    args: list[str],
    *,
    what: str,
    check: bool = True,
    timeout_s: float = DOCKER_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `docker ARGS`, capturing its output.

    Raises:
        LaunchError: docker is missing, does not answer in `timeout_s`, or (with `check`)
            exits non-zero; the message quotes docker's last line.
    """
    try:
        result = subprocess.run(
            [docker_cli(), *args], capture_output=True, text=True, timeout=timeout_s,
            check=False, env=None if env is None else dict(env),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{what} did not answer in {timeout_s:.0f} s",
                          fix="check the docker daemon (docker info)") from None  # fmt: skip
    if check and result.returncode != 0:
        raise LaunchError(f"{what} failed: {last_line(result)}", fix="read docker's message")
    return result


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    """Docker's last stderr line that says something, or the exit code when it printed
    nothing. The CLI's closing hint (`Run 'docker run --help' for more information`)
    is skipped: the error is the line before it."""
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not _HINT.fullmatch(line)] or lines
    return lines[-1] if lines else f"exit code {result.returncode}"


def is_gone(result: subprocess.CompletedProcess[str]) -> bool:
    """Whether a failed call failed because the container does not exist."""
    return result.returncode != 0 and any(text in result.stderr for text in _GONE)


def is_name_conflict(result: subprocess.CompletedProcess[str]) -> bool:
    """Whether `docker run` failed because another container has the name."""
    return result.returncode != 0 and _CONFLICT in result.stderr


def container_id_of(ref: str) -> str | None:
    """The full id of the container docker knows by `ref` (a name or an id), or None.

    Raises:
        LaunchError: docker failed for another reason than there being no such container
            (an unreachable daemon).
    """
    result = docker(["inspect", "--type", "container", "-f", "{{.Id}}", ref],
                    what="docker inspect", check=False)  # fmt: skip
    if result.returncode != 0:
        if is_gone(result):
            return None
        raise LaunchError(f"docker inspect {ref} failed: {last_line(result)}",
                          fix="check the docker daemon (docker info)")  # fmt: skip
    return result.stdout.strip() or None


def remove_container(container_id: str) -> bool:
    """Remove the container whose full id is `container_id`; True when one was removed.

    Docker also accepts names and id prefixes, so the id is looked up first and only a
    container with exactly this id is removed: nothing else is ever touched.

    Raises:
        LaunchError: docker cannot inspect or remove it.
    """
    if container_id_of(container_id) != container_id:
        return False
    removed = docker(["rm", "-f", container_id], what="docker rm", check=False)
    if removed.returncode != 0 and not is_gone(removed):
        raise LaunchError(f"docker rm {container_id[:12]} failed: {last_line(removed)}",
                          fix="check the docker daemon; the state is kept")  # fmt: skip
    return removed.returncode == 0


def ensure_image(image: str) -> None:
    """Pull the image unless it is present, with docker's progress on stderr.

    Raises:
        LaunchError: the pull fails (unknown image, no access, no network).
    """
    present = docker(["image", "inspect", image], what="docker image inspect", check=False)
    if present.returncode == 0:
        return
    print(f"pulling {image} (not present locally)", file=sys.stderr)
    pulled = subprocess.run([docker_cli(), "pull", image], stdout=sys.stderr, check=False)
    if pulled.returncode != 0:
        raise LaunchError(f"docker pull {image} failed (exit code {pulled.returncode})",
                          fix="check the image name, registry access (docker login) and "
                          "network")  # fmt: skip


def docker_passthrough(args: list[str]) -> int:
    """Run a docker command with its output on this terminal; returns its exit code.

    Raises:
        LaunchError: docker is not installed.
    """
    try:
        return subprocess.run([docker_cli(), *args], check=False).returncode
    except KeyboardInterrupt:
        return 130
