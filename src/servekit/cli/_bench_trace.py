"""`servekit bench --trace ...` options as a Trace and its replay point (shell)."""

from __future__ import annotations

from typing import Any

from servekit.bench.spec import PointSpec
from servekit.workload.traces import Trace


def trace_input(opts: dict[str, Any], max_model_len: int | None) -> tuple[Trace, PointSpec] | None:
    """The trace to replay and its one point, or None without --trace."""
    if opts.get("trace") is None:
        return None
    raise NotImplementedError("trace replay is being built")
