"""`servekit sim run`'s load from its options (shell): fixed-length points, a trace
replay, or sessions and agent loops, read by the same `traffic_load` bench uses."""

from __future__ import annotations

from typing import Any

from servekit.bench.summary import session_info, tool_name, trace_info
from servekit.cli._load import traffic_load
from servekit.cli._load_options import LoadOptions
from servekit.profiles import Profile
from servekit.results.summary import Workload
from servekit.workload.load import Load
from servekit.workload.traces import mean_lengths


def sim_load(opts: dict[str, Any], profile: Profile, ilen: int, olen: int) -> Load:
    """The load the options ask for (`ilen`, `olen`: the lengths when none are given)."""
    return traffic_load(
        LoadOptions.of(opts),
        command="sim run",
        max_model_len=profile.serve_args.max_model_len,
        lens=(ilen, olen),
        requests_per_point=opts["requests_per_point"],
    )


def sim_workload(load: Load) -> Workload:
    """The summary's description of the load."""
    if load.trace is not None:
        means = mean_lengths(load.trace) or (load.input_len.mean, load.output_len.mean)
        return Workload(
            input_len=means[0],
            output_len=means[1],
            temperature=load.temperature,
            requests_per_point=len(load.trace.requests),
            seed=load.seed,
            trace=trace_info(load.trace),
        )
    sessions = load.sessions
    return Workload(
        input_len=load.input_len.mean,
        output_len=load.output_len.mean,
        temperature=load.temperature,
        requests_per_point=sessions.sessions_per_point if sessions else load.requests_per_point,
        seed=load.seed,
        tools=[tool_name(t) for t in load.tools] if load.tools else None,
        sessions=session_info(sessions),
    )
