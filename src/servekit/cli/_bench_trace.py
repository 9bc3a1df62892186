"""The trace options (`--trace ...`) of bench, sim run and tune as a Trace (shell)."""

from __future__ import annotations

from servekit.cli._load_options import LoadOptions
from servekit.cli._values import read_text_option
from servekit.errors import UsageError
from servekit.workload.traces import Trace, load_trace


def trace_input(options: LoadOptions, max_model_len: int | None) -> Trace | None:
    """The trace to replay, or None without --trace.

    Raises:
        UsageError: --trace with options that set the load another way, or a bad trace.
    """
    if options.trace is None:
        return None
    _refuse_with_trace(options)
    path = options.trace
    return load_trace(
        read_text_option(path, "--trace"),
        str(path),
        options.trace_format,
        time_scale=options.time_scale,
        start_s=options.trace_start,
        duration_s=options.trace_duration,
        max_requests=options.max_requests,
        max_model_len=max_model_len,
        block_tokens=options.trace_block_tokens,
    )


def _refuse_with_trace(options: LoadOptions) -> None:
    """One line for each option a replay cannot honour (the trace sets times and prompts)."""
    refusals = [
        (
            options.conversations is not None or options.turns is not None,
            "--trace replays single requests; it cannot take --conversations or --turns",
            "drop --trace, or drop the session options",
        ),
        (
            bool(options.agent),
            "--trace cannot run --agent loops",
            "drop --trace, or drop --agent",
        ),
        (
            options.dataset is not None,
            "--trace gives the prompt lengths; it cannot take --dataset",
            "drop --dataset (or --trace)",
        ),
        (
            options.input_len is not None
            or options.output_len is not None
            or bool(options.shared_prefix),
            "--trace gives every request's lengths and prefix sharing; it cannot take "
            "--input-len, --output-len or --shared-prefix",
            "drop them (window the trace with --trace-start, --trace-duration, --max-requests)",
        ),
        (
            options.concurrency is not None or options.rate is not None,
            "--trace sets the send times; it cannot take --concurrency or --rate",
            "drop them, and speed the trace up or down with --time-scale",
        ),
        (
            (options.workers or 1) > 1,
            "--trace with --workers > 1 is not supported yet",
            "replay with --workers 1",
        ),
    ]
    for refused, message, fix in refusals:
        if refused:
            raise UsageError(message, fix=fix)
