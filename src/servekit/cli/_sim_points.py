"""`servekit sim run`'s load points from its options (shell): fixed-length points, a trace
replay, or sessions and agent loops, read by bench's own parsers."""

from __future__ import annotations

from typing import Any

from servekit.bench.summary import session_info, trace_info
from servekit.cli._bench_sessions import sessions_input
from servekit.cli._bench_trace import trace_input
from servekit.cli._output import check_load_options
from servekit.cli._values import parse_numbers, read_text_option
from servekit.profiles import Profile
from servekit.results.summary import Workload
from servekit.sim.offline import AnyPoint, LoadPoint
from servekit.sim.traffic import SessionsPoint, TracePoint
from servekit.workload.tools import parse_tools


def sim_points(
    opts: dict[str, Any], profile: Profile, ilen: int, olen: int
) -> tuple[list[AnyPoint], Workload]:
    """The load points the options ask for, and the summary's description of the load.

    Trace and session options are bench's, read by bench's own parsers.
    """
    temperature, seed = opts["temperature"], opts["seed"]
    concurrency, rate, arrival = opts["concurrency"], opts["rate"], opts["arrival"]
    wanted = {"api": "chat", "dataset": None, "workers": 1}
    replay = trace_input({**opts, **wanted}, profile.serve_args.max_model_len)
    if replay is not None:
        trace, spec = replay
        lengths = [(r.input_len, r.output_len) for r in trace.requests] or [(ilen, olen)]
        workload = Workload(
            input_len=round(sum(i for i, _ in lengths) / len(lengths)),
            output_len=round(sum(o for _, o in lengths) / len(lengths)),
            temperature=temperature,
            requests_per_point=len(trace.requests),
            seed=seed,
            trace=trace_info(trace),
        )
        return [TracePoint(spec.label, trace, temperature, rate_rps=spec.rate_rps)], workload
    check_load_options(concurrency, rate, arrival)
    tools = (
        parse_tools(read_text_option(opts["tools"], "--tools"), str(opts["tools"]))
        if opts["tools"]
        else ()
    )
    sessions = sessions_input(
        {**opts, **wanted, "input_len": str(ilen), "output_len": str(olen)}, tools
    )
    levels: list[tuple[str, int | None, float | None]] = [
        (f"c={int(c)}", int(c), None) for c in parse_numbers(concurrency, int, "--concurrency")
    ]
    levels += [
        (f"rate={r:g}", None, r) for r in parse_numbers(rate, float, "--rate", allow_inf=True)
    ]
    workload = Workload(
        input_len=ilen,
        output_len=olen,
        temperature=temperature,
        requests_per_point=sessions.sessions_per_point if sessions else opts["requests_per_point"],
        seed=seed,
        tools=[_tool_name(t) for t in tools] if tools else None,
        sessions=session_info(sessions),
    )
    if sessions is not None:
        per_point = sessions.sessions_per_point
        return [
            SessionsPoint(label, sessions, index * per_point, temperature, c, r, arrival)
            for index, (label, c, r) in enumerate(levels)
        ], workload
    n = opts["requests_per_point"]
    return [
        LoadPoint(label, n, ilen, olen, temperature, concurrency=c, rate_rps=r, arrival=arrival)
        if r is not None
        else LoadPoint(label, n, ilen, olen, temperature, concurrency=c)
        for label, c, r in levels
    ], workload


def _tool_name(tool: dict[str, Any]) -> str | None:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None
