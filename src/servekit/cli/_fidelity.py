"""The fidelity benchmark's runner (shell): plan corpus entries through the public CLI.

For each startup it writes the joined config.json to a temporary directory, runs
`servekit profiles new` with the entry's GPU, version and `--set` launch settings, then
`servekit plan PROFILE --json` (in-process, through click's runner on `servekit.cli.main`),
and hands the documents to `servekit.plan.fidelity.compare_entry`.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from servekit.cli.main import cli
from servekit.plan.fidelity import (
    Corpus,
    EntryResult,
    LaunchPlan,
    Unplanned,
    compare_entry,
    launch_plan,
    parse_corpus,
)

CORPUS_FILES = ("startups.jsonl", "configs.jsonl")


def read_corpus(directory: Path) -> Corpus:
    """Read `startups.jsonl` and `configs.jsonl` from a corpus directory."""
    startups, configs = ((directory / name).read_text(encoding="utf-8") for name in CORPUS_FILES)
    return parse_corpus(startups, configs)


def run_corpus(corpus: Corpus) -> tuple[EntryResult, ...]:
    """Plan every startup of `corpus` and compare it with its log's figures."""
    runner = CliRunner()
    results: list[EntryResult] = []
    with tempfile.TemporaryDirectory(prefix="servekit-fidelity-") as tmp:
        for entry in corpus.startups:
            launch = launch_plan(entry, corpus.configs)
            if isinstance(launch, Unplanned):
                results.append(compare_entry(entry, launch, None))
                continue
            plan, capacity = plan_entry(runner, launch, Path(tmp))
            results.append(compare_entry(entry, launch, plan, capacity))
    return tuple(results)


def plan_entry(
    runner: CliRunner, launch: LaunchPlan, workdir: Path
) -> tuple[Mapping[str, Any] | str, Mapping[str, Any] | str | None]:
    """`profiles new` then `plan --json` for one entry: the plan and the one at the logged
    KV memory (when the log printed one), or the CLI's error line."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", launch.entry.id).lstrip("-._") or "entry"
    config_path = workdir / f"{name}.config.json"
    config_path.write_text(json.dumps(dict(launch.config)), encoding="utf-8")
    profile_path = workdir / f"{name}.yaml"
    args = ["profiles", "new", name, "--model-config", str(config_path)]
    args += ["--gpu", launch.gpu, "--gpus", str(launch.count)]
    if launch.engine_version is not None:
        args += ["--engine-version", launch.engine_version]
    for item in launch.sets:
        args += ["--set", item]
    made = runner.invoke(cli, [*args, "-o", str(profile_path)])
    if made.exit_code != 0:
        error = _error_line("profiles new", made)
        return error, error
    plan = _plan(runner, profile_path, ())
    capacity = None
    if launch.capacity_bytes is not None:
        capacity = _plan(runner, profile_path, (f"kv_cache_memory_bytes={launch.capacity_bytes}",))
    return plan, capacity


def _plan(runner: CliRunner, profile: Path, sets: tuple[str, ...]) -> Mapping[str, Any] | str:
    args = ["plan", str(profile), "--json"]
    for item in sets:
        args += ["--set", item]
    result = runner.invoke(cli, args)
    # A plan that does not fit still prints its document, then exits 1.
    try:
        document = json.loads(result.stdout)
    except ValueError:
        return _error_line("plan", result)
    if not isinstance(document, dict):
        return _error_line("plan", result)
    return document


def _error_line(step: str, result: Result) -> str:
    """The last line the command wrote to stderr, or the exception it raised."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if lines:
        return f"{step}: {lines[-1]}"
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        return f"{step}: {type(exc).__name__}: {exc}"
    return f"{step}: exit {result.exit_code} without a message"
