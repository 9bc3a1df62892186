"""The docker tier: a private Docker engine and a local base image, once per session.

Every test here is marked `docker` (and integration, slow). The daemon and the image are
made by `docker_tier.py` (importable from every test here); at the end of the session
everything is removed and `leftovers` must be empty, or the session's teardown fails.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from docker_tier import (  # noqa: E402
    Daemon,
    build_base_image,
    leftovers,
    start_daemon,
    stop_daemon,
)

BASE_IMAGE = "servekit-test-base:tier"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this directory docker, integration and slow."""
    for item in items:
        if "/tests/docker/" in str(item.path):
            for marker in ("docker", "integration", "slow"):
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[Daemon]:
    """The session's private dockerd (see docker_tier.py)."""
    daemon = start_daemon()
    try:
        yield daemon
    finally:
        stop_daemon(daemon)
    left = leftovers(daemon)
    assert not left, f"the private docker daemon left things behind: {left}"


@pytest.fixture(scope="session")
def base_image(docker_daemon: Daemon) -> str:
    """The tier's base image (Debian, Python 3, patch, servekit; the engine stand-in as
    its entrypoint), built without a registry."""
    return build_base_image(docker_daemon, BASE_IMAGE, docker_daemon.root / "build")
