"""Options a load would ignore are refused with one line naming them (bench and sim run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRACE = str(EXAMPLES / "traces" / "mooncake.jsonl")
TOOLS = str(EXAMPLES / "agent" / "tools.json")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--concurrency", "1", "--time-scale", "0.5"], "--time-scale applies to --trace"),
        (["--concurrency", "1", "--max-requests", "3"], "--max-requests applies to --trace"),
        (["--trace", TRACE, "--arrival", "constant"], "--arrival does not apply to a --trace"),
        (["--trace", TRACE, "--requests-per-point", "9"], "--requests-per-point does not apply"),
        (["--trace", TRACE, "--max-concurrency", "2"], "--max-concurrency does not apply"),
        (["--turns", "2", "--concurrency", "1", "--warmup", "2"], "--warmup does not apply"),
        (["--turns", "2", "--concurrency", "1", "--requests-per-point", "5"], "use --sessions"),
        (["--concurrency", "1", "--think-time", "1"], "--think-time applies to sessions only"),
        (["--turns", "2", "--concurrency", "1", "--tool-latency", "1"], "--tool-latency applies"),
    ],
)
def test_bench_refuses_an_option_its_load_ignores(
    args: list[str], named: str, tmp_path: Path
) -> None:
    """Exit 2 before anything is sent (the URL has no server), naming the option."""
    out = str(tmp_path / "run")
    result = CliRunner().invoke(cli, ["bench", "--url", "http://127.0.0.1:9", "--out", out, *args])
    assert result.exit_code == 2, result.output
    assert named.replace("use --sessions", "--sessions N") in result.output


def test_sessions_take_warmup_0(tmp_path: Path) -> None:
    """--warmup 0 says what sessions do anyway: accepted (the run fails later, dead URL)."""
    out = str(tmp_path / "run")
    result = CliRunner().invoke(cli, [
        "bench", "--url", "http://127.0.0.1:9", "--out", out, "--turns", "2", "--concurrency",
        "1", "--warmup", "0",
    ])  # fmt: skip
    assert result.exit_code != 0
    assert "--warmup" not in result.output


def test_defaults_never_count_as_given(tmp_path: Path) -> None:
    """A plain run with every default passes the check (it fails later, on the dead URL)."""
    out = str(tmp_path / "run")
    result = CliRunner().invoke(
        cli, ["bench", "--url", "http://127.0.0.1:9", "--out", out, "--concurrency", "1"]
    )
    assert result.exit_code != 0
    assert "does not apply" not in result.output
    assert "applies to" not in result.output


def test_sim_run_refuses_tools_without_agent() -> None:
    result = CliRunner().invoke(
        cli,
        ["sim", "run", "--profile", "llama-3.1-70b-4xh100", "--concurrency", "1", "--tools", TOOLS],
    )
    assert result.exit_code == 2
    assert "--tools is used by --agent loops only" in result.output
