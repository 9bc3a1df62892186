"""The `doctor --json` and `logs analyze --json` documents (core): the machine's facts,
the findings and the exit code; what an engine log says. Frozen and versioned
(docs/schemas/doctor.schema.json, logs-analyze.schema.json)."""

from __future__ import annotations

from typing import Literal

from servekit.doctor.facts import MachineFacts
from servekit.doctor.findings import Finding
from servekit.kb.known_issues import Fix
from servekit.results import Document

DOCTOR_VERSION: Literal[1] = 1
LOG_ANALYSIS_VERSION: Literal[1] = 1


class SeverityCounts(Document):
    """How many findings of each severity."""

    error: int
    warning: int
    info: int


class DoctorDocument(Document):
    """One profile examined on this machine.

    Attributes:
        profile: the profile's name.
        runtime: "docker" or "process", as asked.
        engine_version: the profile's vLLM version.
        compute_capability: the GPUs' own when NVML finds one kind, else the catalog's.
        kb_version: the known-issue knowledge base's version.
        machine: what the probes found (NVML, docker, /dev/shm, the model directories).
        findings: most serious first.
        counts: findings per severity.
        exit_code: 3 when a finding fails the check (an error; with --strict, a warning).
    """

    schema_version: Literal[1]
    profile: str
    runtime: str
    engine_version: str
    compute_capability: str
    kb_version: int
    machine: MachineFacts
    findings: tuple[Finding, ...]
    counts: SeverityCounts
    exit_code: int


class LogFigures(Document):
    """The figures a startup log states (None where it states none); see docs/cli.md."""

    weights_gib: float | None
    model_load_s: float | None
    available_kv_gib: float | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    concurrency_tokens_per_request: int | None
    estimated_cuda_graph_gib: float | None
    graph_capture_gib: float | None
    graph_capture_s: float | None
    cudagraph_profiling: bool | None
    gpu_memory_utilization: float | None
    max_len_estimate: int | None


class LogLine(Document):
    """One quoted log line: its 1-based number and its text (ANSI codes removed)."""

    line: int
    text: str


class LogFailureLine(LogLine):
    """A failure signature's line, with its kind (docs/cli.md lists the kinds)."""

    kind: str


class KnownIssueHit(Document):
    """A known issue the log matches.

    Attributes:
        id: the knowledge-base entry.
        title: its one-line title.
        on_failure: a matching line is also a failure line.
        lines: the first matching lines.
        fixed_in: the vLLM version that fixes it (None when none does yet).
        fix: the entry's fix, the keys its file sets.
        references: links or documents.
    """

    id: str
    title: str
    on_failure: bool
    lines: tuple[LogLine, ...]
    fixed_in: str | None
    fix: Fix
    references: tuple[str, ...]


class LogAnalysisDocument(Document):
    """`servekit logs analyze --json`: what one engine log says.

    Attributes:
        started: the engine reported its KV capacity (it got through profiling).
        failed: the log holds at least one failure signature.
        vllm_version, model, architecture: as the log states them (None when it does not).
        figures: the memory and timing figures.
        failures: every failure signature, in line order.
        known_issues: matched issues, those on failure lines first.
        kb_version: the knowledge base's version.
    """

    schema_version: Literal[1]
    started: bool
    failed: bool
    vllm_version: str | None
    model: str | None
    architecture: str | None
    figures: LogFigures
    failures: tuple[LogFailureLine, ...]
    known_issues: tuple[KnownIssueHit, ...]
    kb_version: int
