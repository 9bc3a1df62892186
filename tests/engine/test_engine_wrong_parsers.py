"""validate catches a server started without MiniMax-M3's reasoning and tool parsers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]


def test_validate_fails_reasoning_and_tools_with_a_clear_message(vllm_wrong_parsers: Any) -> None:
    """Markers leak into content and auto tool choice is refused: both checks fail, saying
    which server flag to fix; exit 3."""
    result = CliRunner().invoke(cli, [
        "validate", "--url", vllm_wrong_parsers.url, "--only", "identity,chat,reasoning,tools",
        "--thinking-kwargs", '{"thinking_mode": "enabled"}', "--json",
    ])  # fmt: skip
    doc = json.loads(result.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert result.exit_code == 3, checks
    assert checks["health"]["status"] == "pass"
    reasoning = checks["reasoning"]
    assert reasoning["status"] == "fail"
    assert "--reasoning-parser" in reasoning["detail"]
    tools = checks["tool_calls"]
    assert tools["status"] == "fail"
    assert "tool" in tools["detail"]
    assert "--enable-auto-tool-choice" in tools["detail"] or "--tool-call-parser" in tools["detail"]
