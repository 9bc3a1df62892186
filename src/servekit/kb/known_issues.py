"""Known engine issues (core): the versioned data file, checked by pydantic, and matching.

An entry matches a log when one of its log patterns finds a line, and matches a deployment
when the engine version, the GPU compute capability and the model fit its ranges (an empty
range matches anything). Matching is by evidence, not by version alone: the M3 top-k bug's
first fixed release is disputed (docs/engine-facts.md section 5), so the concurrency ladder
proves a fix.
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
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from servekit.errors import ConfigError
from servekit.lines import line_starts, matching_lines

Behaviour = Literal[
    "crash_under_concurrency",
    "garbage_under_concurrency",
    "kv_cache_short",
    "startup_failed",
    "reasoning_field_missing",
    "slower_than_expected",
]

Severity = Literal["error", "warning", "info"]
"""How much a finding matters: error blocks a launch, warning needs a look, info is a fact."""


def _compiles(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The patterns, once each compiles (a bad one fails validation with re's message)."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
    return patterns


class Symptoms(BaseModel):
    """What an issue looks like: engine log lines and observed behaviours."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    log_patterns: tuple[str, ...] = ()
    behaviours: tuple[Behaviour, ...] = ()

    @field_validator("log_patterns")
    @classmethod
    def _patterns_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _compiles(value)


class Fix(BaseModel):
    """How to get rid of an issue: a summary, and whichever concrete remedies apply."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    summary: str
    upgrade: str | None = None
    patch: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    flags: tuple[str, ...] = ()


class Condition(BaseModel):
    """One fact about a profile: a serve argument, env variable, speculative key or patch.

    Exactly one of `serve_arg`, `env`, `speculative`, `patch` is set. With `equals` the
    setting must have that value; without it, the setting must be present (not null).
    `patch` holds when a profile patch's name or URL contains the text.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    serve_arg: str | None = None
    env: str | None = None
    speculative: str | None = None
    patch: str | None = None
    equals: JsonValue = None

    @model_validator(mode="after")
    def _exactly_one_subject(self) -> Condition:
        named = [self.serve_arg, self.env, self.speculative, self.patch]
        if sum(x is not None for x in named) != 1:
            raise ValueError("a condition names exactly one of serve_arg, env, speculative, patch")
        return self


class DoctorRule(BaseModel):
    """How `servekit doctor` judges a profile the issue's ranges cover."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    severity: Severity
    when: tuple[Condition, ...] = ()
    mitigated_by: tuple[Condition, ...] = ()


class KnownIssue(BaseModel):
    """One known issue with its symptoms and fix."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    engine_versions: str
    fixed_in: str
    possibly_fixed_from: str | None = None
    compute_capabilities: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    quantizations: tuple[str, ...] = ()
    symptoms: Symptoms
    fix: Fix
    doctor: DoctorRule | None = None
    references: tuple[str, ...] = ()

    @field_validator("engine_versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ValueError(f"{value!r} is not a version range like '>=0.24.0'") from None
        return value

    @field_validator("possibly_fixed_from")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                Version(value)
            except InvalidVersion:
                raise ValueError(f"{value!r} is not a version like '0.26.0'") from None
        return value

    @field_validator("models")
    @classmethod
    def _models_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _compiles(value)

    def possibly_fixed(self, version: str | None) -> bool:
        """Whether `version` is at or past the claimed (unproven) fix."""
        if version is None or self.possibly_fixed_from is None:
            return False
        try:
            return Version(version) >= Version(self.possibly_fixed_from)
        except InvalidVersion:
            return False

    def affects(
        self,
        *,
        version: str | None = None,
        compute_capability: str | None = None,
        model: str | None = None,
        quantization: str | None = None,
    ) -> bool:
        """Whether a deployment falls in this issue's ranges (an unknown fact never excludes).

        `model` may hold several names separated by newlines (path, served name,
        architecture); any one matching a model pattern is enough.
        """
        if version is not None:
            try:
                if Version(version) not in SpecifierSet(self.engine_versions):
                    return False
            except InvalidVersion:
                pass  # e.g. a git build: cannot rule the issue out
        caps = self.compute_capabilities
        if compute_capability and caps and compute_capability not in caps:
            return False
        quants = self.quantizations
        if quantization and quants and quantization.lower() not in quants:
            return False
        if model and self.models:
            return any(re.search(p, model) for p in self.models)
        return True


class KnowledgeBase(BaseModel):
    """The whole data file: its version and its entries (ids unique)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: int = Field(gt=0)
    issues: tuple[KnownIssue, ...]

    @field_validator("issues")
    @classmethod
    def _unique_ids(cls, value: tuple[KnownIssue, ...]) -> tuple[KnownIssue, ...]:
        seen: set[str] = set()
        for issue in value:
            if issue.id in seen:
                raise ValueError(f"known issue id {issue.id!r} appears twice")
            seen.add(issue.id)
        return value


@cache
def knowledge_base() -> KnowledgeBase:
    """The built-in knowledge base, validated.

    Raises:
        ConfigError: the data file is malformed (a packaging bug).
    """
    text = resources.files("servekit.kb").joinpath("known_issues.yaml").read_text("utf-8")
    try:
        return KnowledgeBase.model_validate(yaml.safe_load(text))
    except ValidationError as exc:
        raise ConfigError(
            f"servekit's known_issues.yaml is invalid: {exc}",
            fix="reinstall servekit; the packaged knowledge base is damaged",
        ) from None


def known_issues() -> tuple[KnownIssue, ...]:
    """Every entry of the built-in knowledge base.

    Raises:
        ConfigError: the data file is malformed (a packaging bug).
    """
    return knowledge_base().issues


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


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
    quantization: str | None = None,
    max_lines: int | None = 3,
) -> list[LogMatch]:
    """Issues whose log patterns match `lines` (and, when given, that show `behaviour` and
    whose ranges cover the deployment), with up to `max_lines` matching lines each (all
    of them when None)."""
    issues = [
        issue
        for issue in known_issues()
        if issue.symptoms.log_patterns
        and (behaviour is None or behaviour in issue.symptoms.behaviours)
        and issue.affects(
            version=version,
            compute_capability=compute_capability,
            model=model,
            quantization=quantization,
        )
    ]
    if not issues:
        return []
    # Each pattern scans the whole text once (a day of serving is hundreds of thousands of
    # request and stats lines), and the few matches are mapped back to line numbers.
    text = "\n".join(lines)
    starts = line_starts(lines)
    found = []
    for issue in issues:
        patterns = [re.compile(p) for p in issue.symptoms.log_patterns]
        hits = [
            (index + 1, _ANSI.sub("", lines[index]).strip())
            for index in matching_lines(patterns, text, starts)
        ]
        if hits:
            found.append(LogMatch(issue, tuple(hits if max_lines is None else hits[:max_lines])))
    return found
