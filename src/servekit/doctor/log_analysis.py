"""Startup and crash log analysis (core): figures, failures, and the known issues they match.

`analyze_log` reads one vLLM log's text with `plan.startup_log.parse_startup_log` and
matches every line against the knowledge base. The log names the vLLM version, the
model path and the resolved architecture, which narrow the match (the MiniMax-M3 top-k
bug is not named for a Qwen crash); the GPU's compute capability is not in the log,
so the caller may pass it (from a profile or `--gpu`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servekit.kb.known_issues import KnownIssue, knowledge_base, match_log_lines
from servekit.plan.startup_log import StartupFigures, parse_startup_log

__all__ = ["IssueHit", "LogAnalysis", "analyze_log", "log_analysis_to_json"]

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
    figures = parse_startup_log(text)
    names = [n for n in (figures.model, figures.architecture, model_hint) if n]
    failure_lines = {failure.line_no for failure in figures.failures}
    matches = match_log_lines(
        text.split("\n"),
        version=figures.vllm_version,
        compute_capability=compute_capability,
        model="\n".join(names) or None,
        quantization=quantization,
        max_lines=None,
    )
    hits = [
        IssueHit(
            issue=m.issue,
            lines=m.lines[:_MAX_QUOTED_LINES],
            on_failure=any(number in failure_lines for number, _ in m.lines),
        )
        for m in matches
    ]
    hits.sort(key=lambda hit: not hit.on_failure)  # stable: knowledge-base order within
    return LogAnalysis(figures=figures, issues=tuple(hits), kb_version=knowledge_base().version)


def log_analysis_to_json(analysis: LogAnalysis) -> dict[str, Any]:
    """The `servekit logs analyze --json` document."""
    f = analysis.figures
    return {
        "started": analysis.started,
        "failed": analysis.failed,
        "vllm_version": f.vllm_version,
        "model": f.model,
        "architecture": f.architecture,
        "figures": {
            "weights_gib": f.weights_gib,
            "model_load_s": f.model_load_s,
            "available_kv_gib": f.available_kv_gib,
            "kv_cache_tokens": f.kv_cache_tokens,
            "max_concurrency": f.max_concurrency,
            "concurrency_tokens_per_request": f.concurrency_tokens_per_request,
            "estimated_cuda_graph_gib": f.estimated_cuda_graph_gib,
            "graph_capture_gib": f.graph_capture_gib,
            "graph_capture_s": f.graph_capture_s,
            "cudagraph_profiling": f.cudagraph_profiling,
            "gpu_memory_utilization": f.gpu_memory_utilization,
            "max_len_estimate": f.max_len_estimate,
        },
        "failures": [
            {"kind": x.kind, "line": x.line_no, "text": x.text} for x in analysis.figures.failures
        ],
        "known_issues": [
            {
                "id": hit.issue.id,
                "title": hit.issue.title,
                "on_failure": hit.on_failure,
                "lines": [{"line": n, "text": t} for n, t in hit.lines],
                "fixed_in": hit.issue.fixed_in,
                "fix": hit.issue.fix.model_dump(mode="json", exclude_defaults=True),
                "references": list(hit.issue.references),
            }
            for hit in analysis.issues
        ],
        "kb_version": analysis.kb_version,
    }
