"""`servekit bench --trace ...` options as a Trace and its replay point (shell)."""

from __future__ import annotations

from typing import Any

from servekit.bench.spec import PointSpec
from servekit.cli._values import read_text_option
from servekit.errors import UsageError
from servekit.workload.traces import Trace, load_trace, replay_rate


def trace_input(opts: dict[str, Any], max_model_len: int | None) -> tuple[Trace, PointSpec] | None:
    """The trace to replay and its one point, or None without --trace.

    The point sends the trace's requests at its offsets (`PointSpec.schedule`); its
    `rate_rps` is the replay's mean rate (requests over the span of their offsets, or over
    the scaled window when --trace-duration is given).

    Raises:
        UsageError: --trace with options that set the load another way, or a bad trace.
    """
    if opts.get("trace") is None:
        return None
    _refuse_with_trace(opts)
    path = opts["trace"]
    trace = load_trace(
        read_text_option(path, "--trace"),
        str(path),
        opts["trace_format"],
        time_scale=opts["time_scale"],
        start_s=opts["trace_start"],
        duration_s=opts["trace_duration"],
        max_requests=opts["max_requests"],
        max_model_len=max_model_len,
        block_tokens=opts["trace_block_tokens"],
    )
    offsets = tuple(r.offset_s for r in trace.requests)
    return trace, PointSpec(
        "trace",
        rate_rps=replay_rate(trace),
        schedule=offsets,
        requests=len(offsets),
    )


def _refuse_with_trace(opts: dict[str, Any]) -> None:
    """One line for each option a replay cannot honour (the trace sets times and prompts)."""
    refusals = [
        (
            opts.get("conversations") is not None or opts.get("turns") is not None,
            "--trace replays single requests; it cannot take --conversations or --turns",
            "drop --trace, or drop the session options",
        ),
        (
            bool(opts.get("agent")),
            "--trace cannot run --agent loops",
            "drop --trace, or drop --agent",
        ),
        (
            opts.get("dataset") is not None,
            "--trace gives the prompt lengths; it cannot take --dataset",
            "drop --dataset (or --trace)",
        ),
        (
            opts.get("input_len") is not None
            or opts.get("output_len") is not None
            or bool(opts.get("shared_prefix")),
            "--trace gives every request's lengths and prefix sharing; it cannot take "
            "--input-len, --output-len or --shared-prefix",
            "drop them (window the trace with --trace-start, --trace-duration, --max-requests)",
        ),
        (
            opts.get("concurrency") is not None or opts.get("rate") is not None,
            "--trace sets the send times; it cannot take --concurrency or --rate",
            "drop them, and speed the trace up or down with --time-scale",
        ),
        (
            (opts.get("workers") or 1) > 1,
            "--trace with --workers > 1 is not supported yet",
            "replay with --workers 1",
        ),
    ]
    for refused, message, fix in refusals:
        if refused:
            raise UsageError(message, fix=fix)
