"""Startup and crash log analysis (core): figures, failures, and the known issues they match.

`analyze_log` (or `LogAnalyzer`, batch by batch) reads one vLLM log with `plan.startup_log` and
matches every line against the knowledge base. The log names the vLLM version, the
model path and the resolved architecture, which narrow the match (the MiniMax-M3 top-k
bug is not named for a Qwen crash); the GPU's compute capability is not in the log,
so the caller may pass it (from a profile or `--gpu`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servekit.doctor.documents import (
    LOG_ANALYSIS_VERSION,
    KnownIssueHit,
    LogAnalysisDocument,
    LogFailureLine,
    LogFigures,
    LogLine,
)
from servekit.kb.known_issues import Fix, KnownIssue, knowledge_base, known_issues, match_log_lines
from servekit.plan.startup_log import StartupFigures, StartupLogScanner, is_failure_line

__all__ = ["IssueHit", "LogAnalysis", "LogAnalyzer", "analyze_log", "log_analysis_document"]

_MAX_QUOTED_LINES = 3


@dataclass(frozen=True, slots=True)
class IssueHit:
    """A known issue whose log patterns matched.

    Attributes:
        issue: the knowledge-base entry.
        lines: up to three matching lines, `(1-based line number, text)`.
        on_failure: True when a matching line is itself a failure line; False when the
            issue was matched by an informational line only (e.g. the CUDA-graph
            profiling notice in a healthy log).
    """

    issue: KnownIssue
    lines: tuple[tuple[int, str], ...]
    on_failure: bool


@dataclass(frozen=True, slots=True)
class LogAnalysis:
    """What a log says: figures, failure lines, and matched known issues (failures first)."""

    figures: StartupFigures
    issues: tuple[IssueHit, ...]
    kb_version: int

    @property
    def failed(self) -> bool:
        """True when the log holds at least one failure signature."""
        return bool(self.figures.failures)

    @property
    def started(self) -> bool:
        """True when the engine reported its KV capacity (it got through profiling)."""
        return self.figures.kv_cache_tokens is not None


def analyze_log(
    text: str,
    *,
    compute_capability: str | None = None,
    quantization: str | None = None,
    model_hint: str | None = None,
) -> LogAnalysis:
    """Read a vLLM log and match it against the known-issues knowledge base.

    Args:
        text: the whole log as captured (any prefixes, ANSI colours).
        compute_capability: the GPUs' compute capability, e.g. "8.0", when known.
        quantization: the checkpoint's quantization, when known.
        model_hint: another name for the model (a profile's path or served name).

    Returns:
        The analysis; issues matched on failure lines come before the others.
    """
    analyzer = LogAnalyzer(
        compute_capability=compute_capability, quantization=quantization, model_hint=model_hint
    )
    analyzer.feed(text.split("\n"))
    return analyzer.finish()


class LogAnalyzer:
    """`analyze_log` over a log given in batches of lines, in order (a file the shell
    streams), in memory bounded by the largest batch: per issue it keeps the first three
    matching lines and whether any matching line was a failure.

    The vLLM version and the model, which narrow the match, are known only once the whole
    log is read, so every issue with log patterns is matched and `finish` keeps those
    the deployment falls in (an unknown fact never excludes, as in `match_log_lines`).
    """

    def __init__(
        self,
        *,
        compute_capability: str | None = None,
        quantization: str | None = None,
        model_hint: str | None = None,
    ) -> None:
        self._figures = StartupLogScanner()
        self._compute_capability = compute_capability
        self._quantization = quantization
        self._model_hint = model_hint
        self._lines: dict[str, list[tuple[int, str]]] = {}  # issue id -> first matching lines
        self._on_failure: dict[str, bool] = {}
        self._count = 0  # lines fed so far

    def feed(self, lines: Sequence[str]) -> None:
        """Read the next lines of the log (without their `\\n`)."""
        self._figures.feed(lines)
        matches = match_log_lines(
            list(lines),
            compute_capability=self._compute_capability,
            quantization=self._quantization,
            max_lines=None,
        )
        for m in matches:
            kept = self._lines.setdefault(m.issue.id, [])
            kept.extend(
                (self._count + n, text) for n, text in m.lines[: _MAX_QUOTED_LINES - len(kept)]
            )
            if not self._on_failure.get(m.issue.id):
                self._on_failure[m.issue.id] = any(is_failure_line(t) for _, t in m.lines)
        self._count += len(lines)

    def finish(self) -> LogAnalysis:
        """The analysis of the whole log fed so far; issues matched on failure lines first."""
        figures = self._figures.finish()
        names = [n for n in (figures.model, figures.architecture, self._model_hint) if n]
        hits = [
            IssueHit(
                issue=issue,
                lines=tuple(self._lines[issue.id]),
                on_failure=self._on_failure[issue.id],
            )
            for issue in known_issues()
            if issue.id in self._lines
            and issue.affects(
                version=figures.vllm_version,
                compute_capability=self._compute_capability,
                model="\n".join(names) or None,
                quantization=self._quantization,
            )
        ]
        hits.sort(key=lambda hit: not hit.on_failure)  # stable: knowledge-base order within
        return LogAnalysis(figures=figures, issues=tuple(hits), kb_version=knowledge_base().version)


def log_analysis_document(analysis: LogAnalysis) -> LogAnalysisDocument:
    """The `servekit logs analyze --json` document."""
    f = analysis.figures
    figures = LogFigures(**{name: getattr(f, name) for name in LogFigures.model_fields})
    return LogAnalysisDocument(
        schema_version=LOG_ANALYSIS_VERSION,
        started=analysis.started,
        failed=analysis.failed,
        vllm_version=f.vllm_version,
        model=f.model,
        architecture=f.architecture,
        figures=figures,
        failures=tuple(
            LogFailureLine(kind=x.kind, line=x.line_no, text=x.text) for x in f.failures
        ),
        known_issues=tuple(
            KnownIssueHit(
                id=hit.issue.id,
                title=hit.issue.title,
                on_failure=hit.on_failure,
                lines=tuple(LogLine(line=n, text=t) for n, t in hit.lines),
                fixed_in=hit.issue.fixed_in,
                # the keys the entry sets (defaults left out), as the file gives them
                fix=Fix(**hit.issue.fix.model_dump(exclude_defaults=True)),
                references=hit.issue.references,
            )
            for hit in analysis.issues
        ),
        kb_version=analysis.kb_version,
    )
