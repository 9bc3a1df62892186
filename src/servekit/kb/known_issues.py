"""Known engine issues (core): the versioned data file, checked by pydantic, and matching.

An entry matches a log when one of its log patterns finds a line, and matches a deployment
when the engine version, the GPU compute capability and the model fit its ranges (an empty
range matches anything). Matching is by evidence, not by version alone: DESIGN.md 6.4 says
the M3 top-k bug's first fixed release is disputed, so the concurrency ladder proves a fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servekit.errors import ConfigError

Behaviour = Literal[
    "crash_under_concurrency",
    "garbage_under_concurrency",
    "kv_cache_short",
    "startup_failed",
    "reasoning_field_missing",
    "slower_than_expected",
]


class Symptoms(BaseModel):
    """What an issue looks like: engine log lines and observed behaviours."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    log_patterns: tuple[str, ...] = ()
    behaviours: tuple[Behaviour, ...] = ()

    @field_validator("log_patterns")
    @classmethod
    def _patterns_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            re.compile(pattern)
        return value


class KnownIssue(BaseModel):
    """One known issue with its symptoms and fix."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    engine_versions: str
    fixed_in: str
    compute_capabilities: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    symptoms: Symptoms
    fix: str
    references: tuple[str, ...] = ()

    @field_validator("engine_versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ValueError(f"{value!r} is not a version range like '>=0.24.0'") from None
        return value

    def affects(
        self,
        *,
        version: str | None = None,
        compute_capability: str | None = None,
        model: str | None = None,
    ) -> bool:
        """Whether a deployment falls in this issue's ranges (an unknown fact never excludes)."""
        if version is not None:
            try:
                if Version(version) not in SpecifierSet(self.engine_versions):
                    return False
            except InvalidVersion:
                pass  # e.g. a git build: cannot rule the issue out
        caps = self.compute_capabilities
        if compute_capability and caps and compute_capability not in caps:
            return False
        if model and self.models:
            return any(re.search(p, model) for p in self.models)
        return True


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: int
    issues: tuple[KnownIssue, ...]


@cache
def known_issues() -> tuple[KnownIssue, ...]:
    """Every entry of the built-in knowledge base.

    Raises:
        ConfigError: the data file is malformed (a packaging bug).
    """
    text = resources.files("servekit.kb").joinpath("known_issues.yaml").read_text("utf-8")
    try:
        return _Base.model_validate(yaml.safe_load(text)).issues
    except ValidationError as exc:
        raise ConfigError(f"servekit's known_issues.yaml is invalid: {exc}") from None


@dataclass(frozen=True, slots=True)
class LogMatch:
    """An issue whose log pattern matched, with the matching lines (1-based numbers)."""

    issue: KnownIssue
    lines: tuple[tuple[int, str], ...]


def match_log_lines(
    lines: list[str],
    *,
    behaviour: Behaviour | None = None,
    version: str | None = None,
    compute_capability: str | None = None,
    model: str | None = None,
    max_lines: int = 3,
) -> list[LogMatch]:
    """Issues whose log patterns match `lines` (and, when given, that show `behaviour` and
    whose ranges cover the deployment), with up to `max_lines` matching lines each."""
    found = []
    for issue in known_issues():
        if behaviour is not None and behaviour not in issue.symptoms.behaviours:
            continue
        if not issue.affects(version=version, compute_capability=compute_capability, model=model):
            continue
        patterns = [re.compile(p) for p in issue.symptoms.log_patterns]
        hits = [
            (number, line.strip())
            for number, line in enumerate(lines, start=1)
            if any(p.search(line) for p in patterns)
        ]
        if hits:
            found.append(LogMatch(issue, tuple(hits[:max_lines])))
    return found
