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


def printable_texts(path: Path) -> list[str]:
    """Every string literal of a module that can reach plan's output: warnings, notes,
    messages and fixes (f-string parts included); docstrings and regular expressions (the
    patterns that read vLLM's log) are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))  # a docstring (or a bare string statement)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
        ):
            skip |= {id(n) for arg in node.args for n in ast.walk(arg)}
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip
    ]


@pytest.mark.parametrize("path", REACHABLE, ids=lambda p: p.name)
def test_warning_texts_name_plan_options(path: Path) -> None:
    """No warning, note or message plan can print spells a vLLM flag plan lacks (such as
    --gpu-memory-utilization or --language-model-only); they name `--set` overrides."""
    named = {opt for text in printable_texts(path) for opt in OPTION.findall(text)}
    assert named <= PLAN_OPTIONS, named - PLAN_OPTIONS


def test_the_warning_scan_sees_warnings() -> None:
    """The scan reads the warnings of plan_warnings and capture_risks (not only fixes)."""
    texts = " ".join(printable_texts(SRC / "plan" / "fit.py"))
    assert "OOM risk during graph capture" in texts
    assert "for text-only serving" in texts


def test_plan_prints_set_overrides_in_its_warnings() -> None:
    """plan on the M3 profile warns about graph capture and multimodal profiling with
    `--set` overrides plan takes, never vLLM's flags."""
    result = CliRunner().invoke(cli, ["plan", "minimax-m3-mxfp8-8xa800"])
    assert result.exit_code == 0, result.stderr
    text = result.output
    assert "--set gpu_memory_utilization=" in text
    assert "--set language_model_only=true" in text
    assert set(OPTION.findall(text)) <= PLAN_OPTIONS, text


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
