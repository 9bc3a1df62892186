"""servekit's knowledge base of known engine issues (core): load it and match symptoms."""

from servekit.kb.known_issues import KnownIssue, known_issues, match_log_lines

__all__ = ["KnownIssue", "known_issues", "match_log_lines"]
