"""`servekit bench` session and agent-loop options as a SessionsSpec (shell)."""

from __future__ import annotations

from typing import Any

from servekit.workload.sessions import SessionsSpec


def sessions_input(
    opts: dict[str, Any], tools: tuple[dict[str, Any], ...]
) -> SessionsSpec | None:
    """The sessions to send, or None without --conversations, --turns or --agent."""
    if opts.get("conversations") is None and opts.get("turns") is None and not opts.get("agent"):
        return None
    raise NotImplementedError("sessions are being built")
