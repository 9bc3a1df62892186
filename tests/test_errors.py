"""Every ServekitError that servekit raises tells the user how to fix it (an AST scan)."""

from __future__ import annotations

import ast
from pathlib import Path

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
