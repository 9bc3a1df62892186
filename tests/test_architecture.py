"""Architecture rules: pure core modules import no I/O, network or UI libraries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "servekit"
FORBIDDEN = {"aiohttp", "click", "rich", "asyncio", "matplotlib", "requests", "httpx", "socket"}
CORE_MODULES = [
    "plan/activations.py",
    "plan/cuda_graphs.py",
    "plan/fit.py",
    "plan/inputs.py",
    "plan/kv_cache.py",
    "plan/quantization.py",
    "plan/reconcile.py",
    "plan/startup_log.py",
    "plan/weights.py",
    "render/argv.py",
    "render/targets.py",
    "render/_container.py",
    "render/_k8s_pod.py",
    "render/_ray.py",
    "render/k8s.py",
    "render/lws.py",
    "render/script.py",
    "render/image.py",
    "render/patches.py",
    "runtime/stages.py",
    "doctor/facts.py",
    "doctor/findings.py",
    "doctor/log_analysis.py",
    "sim/engine.py",
    "sim/textgen.py",
    "sim/_schema_args.py",
    "sim/faults.py",
    "sim/_openai.py",
    "sim/build.py",
    "sim/model.py",
    "sim/offline.py",
    "sim/params.py",
    "sim/step_time.py",
    "sim/sweep.py",
    "analyze/summarize.py",
    "records.py",
    "client/sse.py",
    "client/stream.py",
    "specs.py",
    "units.py",
    "errors.py",
]


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


def test_cli_modules_stay_thin() -> None:
    """Every CLI command module stays under ~100 lines of code."""
    for path in (SRC / "cli").glob("*.py"):
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        assert len(lines) <= 110, path.name
