"""The Load that bench's, sim run's and tune's traffic options describe (shell): the only
place traffic options become traffic.

`traffic_load` checks the options (`LoadOptions`) together and reads the files they name
(a dataset, tools, conversations, a trace), giving the `Load` every consumer takes.
"""

from __future__ import annotations

import dataclasses

from servekit.cli._bench_sessions import sessions_input
from servekit.cli._bench_trace import trace_input
from servekit.cli._load_options import LoadOptions
from servekit.cli._output import check_load_options
from servekit.cli._unused_options import refuse_unused
from servekit.cli._values import parse_numbers, read_text_option
from servekit.errors import UsageError
from servekit.workload.datasets import load_dataset_text, parse_length
from servekit.workload.load import Level, Load
from servekit.workload.tools import parse_tools


def traffic_load(
    options: LoadOptions,
    *,
    command: str,
    max_model_len: int | None,
    lens: tuple[int, int] = (1024, 128),
    concurrency: str | None = None,
    requests_per_point: int = 64,
) -> Load:
    """The load the options describe.

    Args:
        options: the command's traffic options.
        command: "bench", "sim run" or "tune" (bench and sim run refuse options the load
            would not use; tune searches the load levels, so it gives none).
        max_model_len: the engine's context, which a trace's requests must fit.
        lens: the input and output lengths when the options give none (a profile's).
        concurrency: the levels when the options give no --concurrency, --rate or --trace.
        requests_per_point: the count when the options give none.

    Raises:
        UsageError: options that contradict each other, a bad value or file.
    """
    if command != "tune":
        refuse_unused(options, command=command)
    trace = trace_input(options, max_model_len)
    if options.concurrency is None and options.rate is None and trace is None:
        options = dataclasses.replace(options, concurrency=concurrency)
    if trace is None and command != "tune":
        check_load_options(options.concurrency, options.rate, options.arrival)
    options = dataclasses.replace(
        options,
        input_len=options.input_len or str(lens[0]),
        output_len=options.output_len or str(lens[1]),
    )
    ilen = parse_length(options.input_len or "", "--input-len")
    olen = parse_length(options.output_len or "", "--output-len")
    if options.shared_prefix and options.shared_prefix >= ilen.mean // 2:
        raise UsageError(
            f"--shared-prefix {options.shared_prefix} leaves too little of --input-len {ilen.mean}",
            fix="keep the shared prefix under half the input",
        )
    dataset = options.dataset
    items = (
        load_dataset_text(read_text_option(dataset, "--dataset"), str(dataset)) if dataset else None
    )
    tools = (
        parse_tools(read_text_option(options.tools, "--tools"), str(options.tools))
        if options.tools
        else ()
    )
    sessions = None if trace is not None else sessions_input(options, tools)
    # what a point sends: a trace's requests, the sessions per point, or the requests
    per_point = options.requests_per_point or requests_per_point
    if trace is not None:
        per_point = len(trace.requests)
    elif sessions is not None:
        per_point = sessions.sessions_per_point
    levels: tuple[Level, ...] = ()
    if trace is None and command != "tune":
        levels = tuple(
            Level(concurrency=int(c))
            for c in parse_numbers(options.concurrency, int, "--concurrency")
        ) + tuple(
            Level(rate_rps=r) for r in parse_numbers(options.rate, float, "--rate", allow_inf=True)
        )
    return Load(
        input_len=ilen,
        output_len=olen,
        temperature=options.temperature,
        seed=options.seed,
        requests_per_point=per_point,
        levels=levels,
        arrival=options.arrival,
        max_concurrency=options.max_concurrency,
        duration_per_point_s=options.duration_per_point,
        api=options.api,
        shared_prefix=options.shared_prefix,
        dataset=tuple(items) if items else None,
        tools=tools,
        sessions=sessions,
        trace=trace,
    )
