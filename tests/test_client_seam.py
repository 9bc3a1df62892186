"""The client seam: only `servekit.client` (and the simulator's own server) may import an
HTTP or socket stack. Every module of src/servekit is scanned by AST, and the checker is
itself tested on a deliberately broken fixture package."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "servekit"
NETWORK = ("aiohttp", "urllib", "http.client", "socket")
"""Stacks that reach a server: importing any of them (or a submodule) is network code."""
ALLOWED_PREFIXES = ("client/",)
ALLOWED_MODULES = {
    # The simulator's live server is a server, not a client: it serves aiohttp's web app.
    "sim/server.py": "the simulator's aiohttp application and runner",
    "sim/_handlers.py": "the simulator's request handlers (aiohttp.web)",
    "sim/_respond.py": "the simulator's response writers (aiohttp.web)",
    "sim/_pacing.py": "the simulator server's middlewares (aiohttp.web)",
}


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every module an AST imports, `from a import b` as `a.b`."""
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append((node.lineno, node.module))
            names += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return names


def _is_network(name: str) -> bool:
    return any(name == stack or name.startswith(f"{stack}.") for stack in NETWORK)


def seam_violations(root: Path) -> list[str]:
    """`path:line: module` for each network import outside the client and the sim server,
    over every .py file under `root` (a package directory)."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(ALLOWED_PREFIXES) or relative in ALLOWED_MODULES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        seen = set()
        for line, name in _imported(tree):
            if _is_network(name) and line not in seen:
                seen.add(line)
                found.append(f"{relative}:{line}: {name}")
    return found


def test_only_the_client_imports_network_stacks() -> None:
    """No module outside client/ (and the simulator's server) imports aiohttp, urllib,
    http.client or socket."""
    assert SRC.is_dir()
    assert seam_violations(SRC) == []


def test_the_allowed_modules_exist_and_need_it() -> None:
    """Each listed exception is a real module that really imports aiohttp (no stale entry)."""
    for relative in ALLOWED_MODULES:
        tree = ast.parse((SRC / relative).read_text(encoding="utf-8"))
        assert any(_is_network(name) for _, name in _imported(tree)), relative


def test_the_checker_reports_a_broken_fixture(tmp_path: Path) -> None:
    """A fixture package with network imports outside client/ is reported, line by line;
    the same imports inside client/ or a TYPE_CHECKING block are judged the same way."""
    package = tmp_path / "pkg"
    (package / "client").mkdir(parents=True)
    (package / "bench").mkdir()
    (package / "client" / "http.py").write_text("import aiohttp\n", encoding="utf-8")
    (package / "bench" / "leak.py").write_text(
        "from __future__ import annotations\n"
        "import aiohttp.web\n"
        "from urllib.parse import urlsplit\n"
        "from http import client\n"
        "import socket as s\n"
        "import http\n"  # the http package itself (HTTPStatus) is no client
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from aiohttp import ClientSession\n",
        encoding="utf-8",
    )
    (package / "bench" / "clean.py").write_text(
        "import asyncio\nfrom servekit.client.endpoint import Endpoint\n", encoding="utf-8"
    )
    assert seam_violations(package) == [
        "bench/leak.py:2: aiohttp.web",
        "bench/leak.py:3: urllib.parse",
        "bench/leak.py:4: http.client",
        "bench/leak.py:5: socket",
        "bench/leak.py:9: aiohttp",
    ]
