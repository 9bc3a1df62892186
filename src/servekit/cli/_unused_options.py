"""Refuse options a load would silently ignore (shell): one line naming the option.

An option counts as given when it came from the command line or the environment (click's
parameter source), so defaults never trip these checks. Called with no click context (a
test calling the option functions directly), nothing counts as given.
"""

from __future__ import annotations

import click
from click.core import ParameterSource

from servekit.cli._load_options import LoadOptions
from servekit.errors import UsageError

TRACE_ONLY = ("trace_format", "time_scale", "trace_start", "trace_duration", "max_requests",
              "trace_block_tokens", "max_schedule_lag_ms")  # fmt: skip
AGENT_ONLY = ("agent_turns", "tool_latency", "tool_result")


def _given(name: str) -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is None or name not in ctx.params:
        return False
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                              ParameterSource.ENVIRONMENT)  # fmt: skip


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def refuse_unused(options: LoadOptions, *, command: str = "bench") -> None:
    """Raise on the first option given that the load it describes would not use.

    Raises:
        UsageError: e.g. --time-scale without --trace, --arrival with --trace, --warmup with
            sessions, --tool-latency without --agent.
    """
    trace = options.trace is not None
    sessions = bool(options.conversations or options.turns or options.agent)
    agent = bool(options.agent)
    checks: list[tuple[bool, tuple[str, ...], str, str]] = [
        (not trace, TRACE_ONLY, "applies to --trace replays only", "add --trace FILE or drop it"),
        (trace, ("max_concurrency", "arrival", "requests_per_point", "duration_per_point"),
         "does not apply to a --trace replay (the trace sets the times and the count)",
         "window the trace with --trace-start, --trace-duration or --max-requests"),
        (sessions, ("requests_per_point",), "does not apply to sessions",
         "set the sessions per point with --sessions N"),
        (sessions and bool(options.warmup), ("warmup",),
         "does not apply to sessions (they send no warm-up requests)", "drop it, or pass 0"),
        (not sessions, ("think_time",), "applies to sessions only",
         "add --turns N or --conversations FILE, or drop it"),
        (not agent, AGENT_ONLY, "applies to --agent loops only", "add --agent or drop it"),
    ]  # fmt: skip
    if command == "sim run":
        checks.append((not agent, ("tools",), "is used by --agent loops only in sim run",
                       "add --agent or drop it"))  # fmt: skip
    for applies, names, why, fix in checks:
        if not applies:
            continue
        for name in names:
            if _given(name):
                raise UsageError(f"{_flag(name)} {why}", fix=fix)
