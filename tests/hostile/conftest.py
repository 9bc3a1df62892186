"""Fixtures for the hostile suite: one hostile server (tests/hostile/hostile_server.py) on a
free loopback port for the whole session."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # the tests import hostile_server's table of modes
    sys.path.insert(0, str(HERE))
SCRIPT = HERE / "hostile_server.py"


@pytest.fixture(scope="session")
def hostile_url(start_session_script: Callable[..., Any]) -> str:
    """`http://127.0.0.1:PORT` of a running hostile server; append `/m/MODE` for a mode."""
    return str(start_session_script(str(SCRIPT)).url)
