"""Malformed and failing streams are counted by kind through a whole bench run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).with_name("faulty_server.py")


def test_failures_counted_by_kind(tmp_path: Path, start_script: Callable[..., Any]) -> None:
    """Invalid JSON, cuts, missing [DONE], 500, 429 and hangs each land in their class; the
    summary is printed and the run exits 3."""
    url = start_script(str(SCRIPT)).url
    result = CliRunner().invoke(cli, [
        "bench", "--url", url, "--concurrency", "1", "--requests-per-point", "14",
        "--warmup", "0", "--input-len", "4", "--output-len", "2", "--timeout", "0.5",
        "--out", str(tmp_path), "--json",
    ])  # fmt: skip
    assert result.exit_code == 3, result.stderr  # failed requests fail the run (issue 14)
    assert "12 of 14 requests failed" in result.stderr
    point = json.loads(result.stdout)["points"][0]
    assert point["completed"] == 2
    assert point["errors"] == {
        "malformed_chunk": 2,
        "stream_cut": 4,
        "http_500": 2,
        "http_429": 2,
        "timeout": 2,
    }
