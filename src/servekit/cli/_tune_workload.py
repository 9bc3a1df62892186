"""`servekit tune`'s workload options as a TuneWorkload (shell): lengths, sessions, a trace."""

from __future__ import annotations

from typing import Any

from servekit.cli._bench_sessions import sessions_input
from servekit.cli._bench_trace import trace_input
from servekit.cli._values import read_text_option
from servekit.profiles.schema import Profile
from servekit.tune.workload import TuneWorkload
from servekit.workload.tools import parse_tools


def tune_workload(profile: Profile, opts: dict[str, Any]) -> TuneWorkload:
    """The workload the options describe, read by bench's own parsers (sessions, traces)."""
    sim_input = profile.simulator.input_len if profile.simulator else None
    ilen = opts["input_len"] or sim_input or profile.bench_defaults.input_len
    olen = opts["output_len"] or profile.bench_defaults.output_len
    loop = opts["load"]
    base = {
        "concurrency": "1" if loop == "concurrency" else None,
        "rate": "1" if loop == "rate" else None,
        "dataset": None,
        "api": "chat",
        "workers": 1,
        "input_len": str(ilen),
        "output_len": str(olen),
        "requests_per_point": None,
        "warmup": 0,
        "duration_per_point": None,
        "max_concurrency": None,
        "shared_prefix": 0,
    }
    merged = {**opts, **base}
    replay = trace_input(
        {**opts, "dataset": None, "shared_prefix": 0}, profile.serve_args.max_model_len
    )
    tools = (
        parse_tools(read_text_option(opts["tools"], "--tools"), str(opts["tools"]))
        if opts["tools"]
        else ()
    )
    sessions = None if replay is not None else sessions_input(merged, tools)
    requests = opts["requests_per_point"]
    if sessions is not None:
        requests = sessions.sessions_per_point
    return TuneWorkload(
        loop="rate" if replay is not None else loop,
        input_len=ilen,
        output_len=olen,
        temperature=opts["temperature"],
        requests=len(replay[0].requests) if replay is not None else requests,
        arrival=opts["arrival"],
        sessions=sessions,
        trace=replay[0] if replay is not None else None,
    )
