"""servekit's knowledge base of known engine issues (core): load it and match symptoms."""

from servekit.kb.known_issues import (
    Condition,
    KnownIssue,
    Severity,
    knowledge_base,
    known_issues,
    match_log_lines,
)

__all__ = [
    "Condition",
    "KnownIssue",
    "Severity",
    "knowledge_base",
    "known_issues",
    "match_log_lines",
]
