"""Every fix `servekit plan` can print names options plan really has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import servekit
from servekit.cli.main import cli
from servekit.cli.plan import plan_command

SRC = Path(servekit.__file__).parent
# the modules whose errors reach `servekit plan`: profiles, hardware, the planner, its CLI
REACHABLE = [
    *sorted((SRC / "plan").glob("*.py")),
    *sorted((SRC / "profiles").glob("*.py")),
    *sorted((SRC / "hardware").glob("*.py")),
    SRC / "specs.py",
    SRC / "cli" / "plan.py",
]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
PLAN_OPTIONS = {opt for p in plan_command.params for opt in (*p.opts, *p.secondary_opts)}


def fix_texts(path: Path) -> list[str]:
    """The literal text of every `fix=` argument in a module (f-string parts included)."""
    texts = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "fix":
                    texts += [
                        n.value
                        for n in ast.walk(keyword.value)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    ]
        # fixes built apart from the call (misfit_parts returns one)
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in {"fix", "raise_what"} for t in node.targets
        ):
            texts += [
                n.value
                for n in ast.walk(node.value)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
    return texts


@pytest.mark.parametrize("path", REACHABLE, ids=lambda p: p.name)
def test_fix_texts_name_plan_options(path: Path) -> None:
    """No fix in a module plan runs names an option plan lacks (such as --max-model-len)."""
    named = {opt for text in fix_texts(path) for opt in OPTION.findall(text)}
    assert named <= PLAN_OPTIONS, named - PLAN_OPTIONS


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "max_model_len=1000000"],
        ["--set", "max_model_len=1000000", "--set", "kv_cache_memory_bytes=1000"],
    ],
    ids=["utilization", "kv-bytes"],
)
def test_misfit_fix_names_set_overrides(args: list[str]) -> None:
    """A plan that does not fit suggests --set overrides plan accepts."""
    result = CliRunner().invoke(cli, ["plan", "minimax-m3-mxfp8-8xa800", *args])
    assert result.exit_code == 1
    named = set(OPTION.findall(result.stderr))
    assert named, result.stderr
    assert named <= PLAN_OPTIONS, result.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_non_torch_gib_must_be_a_finite_size(value: str) -> None:
    """--non-torch-gib nan/inf is a usage error (exit 2), not a traceback."""
    result = CliRunner().invoke(cli, ["plan", "minimax-m3-mxfp8-8xa800", "--non-torch-gib", value])
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    assert "--non-torch-gib" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
