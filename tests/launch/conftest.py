"""Launch test fixtures; helpers live in `sandbox` (importable from the tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from sandbox import LaunchEnv, make_launch_env  # noqa: E402 - after the path is set


@pytest.fixture
def launch_env(tmp_path: Path) -> LaunchEnv:
    """Fake `vllm` and `docker` first on PATH; state, profiles and logs in tmp_path."""
    return make_launch_env(tmp_path)
