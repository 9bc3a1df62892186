"""Architecture rules, derived from the code: what each module says it is, and what it imports.

Every module's docstring says on its first line whether it is `(core ...)`, `(view ...)`
or `(shell ...)`. Core modules import no I/O, network, UI or clock library, open no files
(servekit's own package data, read through `importlib.resources.files`, is part of the
program) and use no global RNG; views may use rich but do no I/O either; only core modules
may be imported by core modules. Imports between packages point down the layer order
below (docs/adr/0008-layers-and-module-markers.md, with the data flow made explicit:
values, then the pure models, then the one HTTP seam, then the shells that use them, then
the views and the CLI), and no two modules import each other, directly or through others
(every import counts, also inside functions and TYPE_CHECKING).
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "servekit"
FORBIDDEN = {"aiohttp", "click", "rich", "asyncio", "matplotlib", "requests", "httpx", "socket"}
# What a core module may not import: I/O (network, processes, files, terminals), clocks, UI.
IO_LIBRARIES = FORBIDDEN | {
    "datetime",
    "fcntl",
    "http",
    "io",
    "multiprocessing",
    "os",
    "psutil",
    "pynvml",
    "selectors",
    "shutil",
    "signal",
    "subprocess",
    "sys",
    "tempfile",
    "threading",
    "time",
    "urllib",
}
VIEW_ALLOWED = {"rich"}
# Pure modules inside those libraries: string parsing, no I/O.
PURE_SUBMODULES = {"urllib.parse"}
IO_CALLS = {"open", "print", "input"}
IO_METHODS = {
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "iterdir",
    "glob",
    "rglob",
    "mkdir",
    "unlink",
    "touch",
}
# Lowest first. A package may import its own modules, and packages of lower layers only.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors"}),  # the error tree
    # version, units, option vocabularies, lines, secrets, JSON and Markdown out
    frozenset(
        {"servekit", "units", "names", "lines", "redaction", "jsontext", "mdtext", "profile_index"}
    ),
    frozenset({"specs", "records", "reference"}),  # shared values, the seed figures
    frozenset({"results"}),  # the typed documents (summary, plan, validate, compare)
    frozenset({"profiles", "hardware", "kb"}),  # data and its loaders
    frozenset({"plan", "workload", "analyze", "render"}),  # pure models
    frozenset({"doctor", "sim", "client"}),  # checks, the simulator, the one HTTP seam
    frozenset({"runtime", "bench"}),  # shells over the seam
    frozenset({"validate"}),  # uses bench's load driving
    frozenset({"report"}),  # views, documents and plots of everything below
    frozenset({"demo", "tune"}),  # journeys
    frozenset({"schemas"}),  # the published JSON Schemas, generated from every document
    frozenset({"cli"}),
    frozenset({"__main__"}),
)
MARKER = re.compile(r"\((core|view|shell)\b")


@dataclass(frozen=True, slots=True)
class Module:
    """One source module: its dotted name, kind and imports."""

    name: str
    path: Path
    kind: str | None
    imports: frozenset[str]  # every imported module's dotted name (stdlib and third party)
    internal: frozenset[str]  # dotted names of the package's own modules it imports
    io_calls: frozenset[str]


def _dotted(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def scan(root: Path) -> dict[str, Module]:
    """Every module under `root` (a package directory), read by AST."""
    package = root.name
    paths = {_dotted(root, p): p for p in sorted(root.rglob("*.py"))}
    modules: dict[str, Module] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        doc = (ast.get_docstring(tree) or "").splitlines()
        found = MARKER.search(doc[0]) if doc else None
        imports: set[str] = set()
        internal: set[str] = set()
        calls: set[str] = set()
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` depends on the module pkg.sub, `from pkg import name`
                # on pkg itself.
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                    for a in node.names
                ]
            elif isinstance(node, ast.Call):
                calls.update(_io_call(node))
            for target in targets:
                imports.add(target)
                if target.split(".")[0] == package:
                    internal.add(_nearest(target, paths))
        modules[name] = Module(
            name,
            path,
            found.group(1) if found else None,
            frozenset(imports),
            frozenset(internal - {name}),
            frozenset(calls),
        )
    return modules


def _nearest(target: str, paths: Mapping[str, Path]) -> str:
    while target not in paths and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def _io_call(node: ast.Call) -> Iterator[str]:
    func = node.func
    if isinstance(func, ast.Name) and func.id in IO_CALLS:
        yield f"{func.id}()"
    elif isinstance(func, ast.Attribute):
        if func.attr in IO_METHODS and not _packaged_data(func.value):
            yield f".{func.attr}()"
        elif (
            isinstance(func.value, ast.Name)
            and func.value.id == "random"
            and func.attr not in {"Random"}
        ):
            yield f"random.{func.attr}() (the global RNG)"


def _io_imports(imports: frozenset[str]) -> set[str]:
    """The I/O libraries among a module's imports (by top-level name)."""
    return {
        name.split(".")[0]
        for name in imports
        if name.split(".")[0] in IO_LIBRARIES and name not in PURE_SUBMODULES
    }


def _packaged_data(node: ast.expr) -> bool:
    """`files("servekit.x").joinpath(...)`: servekit's own read-only package data, which is
    part of the program (like a constant table), not input."""
    while isinstance(node, ast.Call | ast.Attribute):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "files":
                return True
            node = func
        else:
            node = node.value
    return False


def _layer(name: str) -> int | None:
    parts = name.split(".")
    key = parts[1] if len(parts) > 1 else parts[0]
    for index, layer in enumerate(LAYERS):
        if key in layer:
            return index
    return None


def _package(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def violations(modules: Mapping[str, Module]) -> list[str]:
    """Every broken rule, one line each (empty when the architecture holds)."""
    found: list[str] = []
    for mod in modules.values():
        if mod.kind is None:
            found.append(f"{mod.name}: no (core|view|shell) marker on the docstring's first line")
            continue
        if _layer(mod.name) is None:
            found.append(f"{mod.name}: package {_package(mod.name)!r} is in no layer")
        if mod.kind in {"core", "view"}:
            allowed = VIEW_ALLOWED if mod.kind == "view" else set()
            for lib in sorted(_io_imports(mod.imports) - allowed):
                found.append(f"{mod.name} ({mod.kind}) imports {lib}")
            for call in sorted(mod.io_calls):
                found.append(f"{mod.name} ({mod.kind}) calls {call}")
        for target in sorted(mod.internal):
            dep = modules.get(target)
            if dep is None:
                continue
            if mod.kind == "core" and dep.kind != "core":
                found.append(f"{mod.name} (core) imports {target} ({dep.kind})")
            here, there = _layer(mod.name), _layer(target)
            same = _package(mod.name) == _package(target)
            if not same and here is not None and there is not None and there >= here:
                found.append(f"{mod.name} imports {target}: not a lower layer")
            if not same and target.rsplit(".", 1)[-1].startswith("_"):
                found.append(f"{mod.name} imports {target}: a private module of another package")
    found.extend(f"import cycle: {' -> '.join(c)}" for c in cycles(modules))
    return found


def cycles(modules: Mapping[str, Module]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(modules[node].internal):
            if succ not in modules:
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for name in sorted(modules):
        if name not in index:
            visit(name)
    return groups


MODULES = scan(SRC)
CORE_MODULES = sorted(str(m.path.relative_to(SRC)) for m in MODULES.values() if m.kind == "core")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_is_pure(module: str) -> None:
    """A core module imports none of aiohttp, click, rich, asyncio, matplotlib or sockets."""
    assert not _imports(SRC / module) & FORBIDDEN


def test_core_modules_are_found_from_the_code() -> None:
    """The core list comes from the markers and holds the modules that were listed by hand."""
    by_hand = {"plan/fit.py", "render/argv.py", "sim/engine.py", "analyze/summarize.py"}
    assert by_hand <= set(CORE_MODULES)
    assert len(CORE_MODULES) >= 60


def test_architecture_holds() -> None:
    """Markers, purity, layer order and acyclic imports hold for every module of servekit."""
    assert violations(MODULES) == []


def test_no_dict_of_options_travels_past_the_cli() -> None:
    """Options leave `cli/` as typed values (`LoadOptions`, `Load`, specs): no function
    outside it takes a parameter named like a bag of options and typed as a mapping."""
    bags = {"opts", "options", "params", "kwargs"}
    found = []
    for mod in MODULES.values():
        if mod.name.startswith("servekit.cli"):
            continue
        tree = ast.parse(mod.path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for arg in args:
                text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if arg.arg in bags and text.startswith(("dict", "Mapping", "Any")):
                    found.append(f"{mod.name}.{node.name}({arg.arg}: {text})")
    assert found == [], found


def test_cli_modules_stay_thin() -> None:
    """Every CLI command module stays under ~110 lines of code (its imports included, which
    live in the command's body so that `--help` stays cheap)."""
    for path in (SRC / "cli").glob("*.py"):
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        assert len(lines) <= 120, path.name


BROKEN = {
    "__init__.py": '"""A package (core)."""\n',
    "errors.py": '"""Errors (core)."""\n',
    "plan/__init__.py": '"""Plans (core)."""\n',
    "plan/net.py": '"""Looks pure (core)."""\nimport aiohttp\nfrom servekit.plan import cyc\n'
    "from urllib.parse import urlsplit\n",
    "plan/fetch.py": '"""Fetches (core)."""\nimport urllib.request\n',
    "plan/cyc.py": '"""Loops back (core)."""\nfrom servekit.plan import net\n',
    "plan/files.py": '"""Reads (core)."""\nimport random\nfrom importlib.resources import files\n'
    "\n\ndef f(p):\n    random.shuffle(p)\n    files('servekit').joinpath('d.yaml').read_text()\n"
    "    p.write_text('x')\n    return open(p).read()\n",
    "plan/up.py": '"""Reaches up (core)."""\nfrom servekit.report import view\n',
    "plan/nomark.py": '"""No marker here."""\n',
    "plan/lean.py": '"""Leans on a shell (core)."""\nfrom servekit.runtime import run\n',
    "runtime/__init__.py": '"""Runtime (shell)."""\n',
    "runtime/run.py": '"""Runs (shell)."""\nimport subprocess\n',
    "runtime/_hidden.py": '"""Kept to its package (shell)."""\n',
    "report/peek.py": '"""Peeks (shell)."""\nfrom servekit.runtime import _hidden\n',
    "report/__init__.py": '"""Reports (shell)."""\n',
    "report/view.py": '"""Draws (view, rich)."""\nimport rich\nimport time\n',
    "oddpkg/__init__.py": '"""Unknown package (shell)."""\n',
}


def test_checker_finds_each_broken_rule(tmp_path: Path) -> None:
    """The checker itself: a fixture package that breaks every rule once is reported in full."""
    root = tmp_path / "servekit"
    for rel, text in BROKEN.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    found = violations(scan(root))
    expected = [
        "servekit.plan.net (core) imports aiohttp",
        "servekit.plan.fetch (core) imports urllib",
        "servekit.plan.files (core) calls open()",
        "servekit.plan.files (core) calls random.shuffle() (the global RNG)",
        "servekit.plan.files (core) calls .write_text()",
        "servekit.plan.up (core) imports servekit.report.view (view)",
        "servekit.plan.up imports servekit.report.view: not a lower layer",
        "servekit.plan.nomark: no (core|view|shell) marker on the docstring's first line",
        "servekit.plan.lean (core) imports servekit.runtime.run (shell)",
        "servekit.plan.lean imports servekit.runtime.run: not a lower layer",
        "servekit.report.view (view) imports time",
        "servekit.report.peek imports servekit.runtime._hidden: a private module of another "
        "package",
        "servekit.oddpkg: package 'oddpkg' is in no layer",
        "import cycle: servekit.plan.cyc -> servekit.plan.net",
    ]
    for line in expected:
        assert line in found, line
    assert "servekit.report.view (view) imports rich" not in found
    assert len(found) == len(expected), found


def documented_layers(text: str) -> tuple[frozenset[str], ...]:
    """The numbered layer list of docs/architecture.md's "## Layers" section: each item's
    backticked package names before its first colon."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^\d+\. (.+(?:\n {3}.+)*)", section, flags=re.MULTILINE)
    return tuple(frozenset(re.findall(r"`([^`]+)`", item.split(":", 1)[0])) for item in items)


def test_the_architecture_page_lists_the_layers_this_test_checks() -> None:
    page = SRC.parents[1] / "docs" / "architecture.md"
    assert documented_layers(page.read_text(encoding="utf-8")) == LAYERS
