"""Every ServekitError that servekit raises tells the user how to fix it (an AST scan)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.analyze.slo import parse_slo
from servekit.cli.main import cli
from servekit.errors import UsageError

SRC = Path(__file__).resolve().parent.parent / "src" / "servekit"


def error_classes(trees: dict[str, ast.Module]) -> set[str]:
    """Names of ServekitError and of every class that derives from it, in any module."""
    names = {"ServekitError"}
    while True:
        found = {
            node.name
            for tree in trees.values()
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and any(_name(base) in names for base in node.bases)
        }
        if found <= names:
            return names
        names |= found


def raises_without_fix(trees: dict[str, ast.Module]) -> list[str]:
    """`file:line: Class` for each construction of an error class that passes no fix=.

    Every construction counts, not only `raise Class(...)`: an error built first and raised
    later (a sweep's stop reason) reaches the user the same way.
    """
    classes = error_classes(trees)
    missing: list[tuple[str, int, str]] = []
    for where, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _name(node.func)
            if name in classes and not any(k.arg == "fix" for k in node.keywords):
                missing.append((where, node.lineno, name))
    return [f"{where}:{line}: {name}" for where, line, name in sorted(missing)]


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _parse_tree(root: Path) -> dict[str, ast.Module]:
    return {
        str(path.relative_to(root)): ast.parse(path.read_text(encoding="utf-8"))
        for path in root.rglob("*.py")
    }


def test_every_raised_servekit_error_has_a_fix() -> None:
    """No `raise SomeServekitError(...)` in src/servekit lacks a `fix=` keyword."""
    missing = raises_without_fix(_parse_tree(SRC))
    assert not missing, "raises without fix=:\n" + "\n".join(missing)


def test_the_scanner_finds_a_raise_without_a_fix() -> None:
    """A deliberately broken module: subclasses, attribute calls, errors built then raised."""
    errors = ast.parse(
        "class ServekitError(Exception): ...\n"
        "class PlanError(ServekitError): ...\n"
        "class TooBig(PlanError): ...\n"
    )
    broken = ast.parse(
        "from servekit import errors\n"
        "def f(x):\n"
        "    if x:\n"
        "        raise TooBig('too big') from None\n"
        "    if x > 1:\n"
        "        raise errors.PlanError('no plan', fix='use fewer GPUs')\n"
        "    if x > 2:\n"
        "        raise ValueError('not ours')\n"
        "    stop = errors.ServekitError(f'{x} failed')\n"
        "    raise stop\n"
    )
    found = raises_without_fix({"errors.py": errors, "broken.py": broken})
    assert found == ["broken.py:4: TooBig", "broken.py:9: ServekitError"]


def test_the_cli_prints_one_error_line_with_its_fix_and_exit_code() -> None:
    """A ServekitError from any command becomes `servekit: error: message; fix` and its code."""
    result = CliRunner().invoke(cli, ["bench", "--url", "http://127.0.0.1:9", "--out", "x"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "servekit: error: give exactly one of --concurrency or --rate; "
        "e.g. --concurrency 1,4,16 (closed loop) or --rate 0.5,1,2 (open loop)\n"
    )


def test_failed_checks_shown_by_the_command_add_only_the_exit_code() -> None:
    """`logs analyze` on a crash log exits 3 with its report on stdout and nothing on stderr."""
    crash = Path(__file__).parent / "doctor" / "data" / "m3_v0251_illegal_memory_access.log"
    result = CliRunner().invoke(cli, ["logs", "analyze", str(crash)])
    assert result.exit_code == 3
    assert "illegal memory access" in result.stdout
    assert result.stderr == ""


def test_a_flag_is_named_by_the_cli_and_not_by_the_core_parser() -> None:
    """parse_slo names the value; `bench --slo` names the flag in the same message."""
    message = "'ttft_p99<=0ms': 'ttft_p99<=0ms': the bound must be positive"
    with pytest.raises(UsageError, match=f"^SLO {message}"):
        parse_slo("ttft_p99<=0ms")
    args = ["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--out", "x"]
    result = CliRunner().invoke(cli, [*args, "--slo", "ttft_p99<=0ms"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"servekit: error: --slo {message}")
