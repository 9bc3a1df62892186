"""The tier's own daemon: it runs containers from the local image and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

from docker_tier import Daemon, leftovers, start_daemon, stop_daemon


def test_the_base_image_runs_servekit(docker_daemon: Daemon, base_image: str) -> None:
    """The registry-free image runs the servekit installed in it."""
    out = docker_daemon.cli("run", "--rm", "--network", "host", "--entrypoint", "python3",
                            base_image, "-m", "servekit", "--version")  # fmt: skip
    assert out.startswith("servekit, version ")


def test_a_stopped_daemon_leaves_no_container_image_process_or_mount(
    docker_daemon: Daemon, base_image: str, tmp_path: Path
) -> None:
    """A second private daemon, given a container with a bind mount and a running process,
    an image and a volume: after stop_daemon nothing of it is left on the machine (no
    process of its own or of the container, no mount, no directory)."""
    second = start_daemon()
    try:
        saved = tmp_path / "base.tar"
        docker_daemon.cli("save", "-o", str(saved), base_image)
        second.cli("load", "-i", str(saved))
        (tmp_path / "data").mkdir()
        data = f"{tmp_path / 'data'}:/data:ro"
        second.cli("run", "-d", "--network", "host", "-v", data, "-v", "scratch:/scratch",
                   "--entrypoint", "sleep", base_image, "600")  # fmt: skip
        assert len(second.containers()) == 1
        assert leftovers(second)  # it runs: its processes, mounts and directory are there
    finally:
        stop_daemon(second)
    assert len(second.container_pids) == 1  # the sleep was seen, and is gone
    assert leftovers(second) == []
    assert second.proc.returncode is not None
