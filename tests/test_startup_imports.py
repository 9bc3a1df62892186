"""Start-up stays cheap: the CLI and its cheap commands never import the heavy libraries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from servekit.cli.main import COMMANDS, cli, command_paths

SRC = Path(__file__).resolve().parent.parent / "src"
HEAVY = ("matplotlib", "aiohttp", "numpy")
PROBE = """
import json, runpy, sys
{before}
sys.argv = ["servekit", *json.loads(sys.argv[1])]
code = 0
try:
    runpy.run_module("servekit", run_name="__main__")
except SystemExit as exc:
    code = exc.code or 0
heavy = [name for name in {heavy!r} if name in sys.modules]
print("\\nPROBE " + json.dumps({{"code": code, "heavy": heavy}}))
"""


def probe(args: list[str], before: str = "", heavy: tuple[str, ...] = HEAVY) -> dict[str, object]:
    """Run `servekit ARGS` in a fresh interpreter; its exit code and which of `heavy` it loaded.

    `before` is Python run first (the probe's own test imports a heavy module with it).
    """
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy, before=before), json.dumps(args)],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    line = done.stdout.rsplit("PROBE ", 1)[-1]
    result: dict[str, object] = json.loads(line)
    return result


def test_importing_the_cli_imports_no_heavy_library() -> None:
    """`import servekit.cli.main` in a fresh process leaves matplotlib, aiohttp, numpy out."""
    code = f"import sys, servekit.cli.main; print([m for m in {HEAVY!r} if m in sys.modules])"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args",
    [["--help"], ["profiles", "list"], ["render", "minimax-m3-mxfp8-8xa800", "--target", "vllm"]],
)
def test_cheap_commands_import_no_heavy_library(args: list[str]) -> None:
    """--help, profiles list and render succeed without importing any heavy library."""
    assert probe(args) == {"code": 0, "heavy": []}


def test_the_probe_sees_a_heavy_import() -> None:
    """The probe itself works: a heavy module imported in the process is reported."""
    assert probe(["--help"], before="import numpy") == {"code": 0, "heavy": ["numpy"]}


def test_the_command_table_matches_each_command() -> None:
    """Each listed name resolves to that command, and its summary is the help's first paragraph."""
    ctx = click.Context(cli)
    for name, entry in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None
        assert command.name == name
        first = (command.help or "").split("\n\n")[0]
        assert entry.summary == " ".join(first.split()), name


def test_an_unknown_command_is_a_usage_error() -> None:
    """A name outside the table is click's usual error, exit 2."""
    result = CliRunner().invoke(cli, ["nonesuch"])
    assert result.exit_code == 2
    assert "No such command 'nonesuch'" in result.output


COMMAND_PATHS = command_paths()
# What --help has no need of: the heavy libraries, and pydantic (whose models cost ~60 ms to
# build); a command imports them in its body, when it runs.
HELP_NEEDS_NONE_OF = (*HEAVY, "pydantic", "scipy")


def test_the_command_walk_finds_the_subcommands() -> None:
    """The walk below covers groups' commands (sim run, profiles list), not only the table."""
    assert ["sim", "run"] in COMMAND_PATHS
    assert ["profiles", "list"] in COMMAND_PATHS
    assert len(COMMAND_PATHS) > len(COMMANDS)


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=" ".join)
def test_every_help_imports_no_model_or_heavy_library(path: list[str]) -> None:
    """`servekit ... --help` of every command builds its options without importing numpy,
    aiohttp, matplotlib, scipy or pydantic (benchmarks/bench_startup.py times them)."""
    code = (
        "import json, runpy, sys\n"
        f"sys.argv = ['servekit', *{path!r}, '--help']\n"
        "try:\n    runpy.run_module('servekit', run_name='__main__')\n"
        "except SystemExit as exc:\n    code = exc.code or 0\n"
        f"print('\\nPROBE ' + json.dumps([code, [m for m in {HELP_NEEDS_NONE_OF!r} "
        "if m in sys.modules]]))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
        check=True,
    )  # fmt: skip
    assert json.loads(done.stdout.rsplit("PROBE ", 1)[-1]) == [0, []]


def test_plan_help_names_the_planners_own_non_torch_default() -> None:
    """--non-torch-gib's shown default (written without importing the planner) is the
    planner's constant, and leaving the option out plans with that constant."""
    from servekit.cli.plan import NON_TORCH_DEFAULT_TEXT
    from servekit.plan.fit import NON_TORCH_INCREASE_BYTES
    from servekit.units import GIB

    assert NON_TORCH_DEFAULT_TEXT.split(",")[0] == f"{NON_TORCH_INCREASE_BYTES / GIB:g}"
    result = CliRunner().invoke(cli, ["plan", "--help"], terminal_width=200)
    assert f"default: ({NON_TORCH_DEFAULT_TEXT})" in result.output
    given = CliRunner().invoke(
        cli, ["plan", "minimax-m3-mxfp8-8xa800", "--json", "--non-torch-gib",
              f"{NON_TORCH_INCREASE_BYTES / GIB:g}"],
    )  # fmt: skip
    left_out = CliRunner().invoke(cli, ["plan", "minimax-m3-mxfp8-8xa800", "--json"])
    assert given.exit_code == left_out.exit_code == 0, given.output
    assert given.stdout == left_out.stdout


@pytest.mark.parametrize("args", [["profiles", "list"], ["profiles", "list", "--json"]])
def test_profiles_list_loads_no_profile_schema(args: list[str]) -> None:
    """The built-in profiles are listed from their checked index: neither the profile schema
    nor pydantic is imported (each costs more than the 150 ms start-up budget allows)."""
    before = "import os; os.environ.pop('SERVEKIT_PROFILE_PATH', None)"
    loaded = probe(args, before, heavy=("servekit.profiles.schema", "pydantic"))
    assert loaded == {"code": 0, "heavy": []}
