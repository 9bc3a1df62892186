"""`servekit sim run` (shell): simulate a sweep offline and write records and a summary."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

from servekit import __version__
from servekit.bench.store import RUN_FILES, RecordWriter, check_run_dir, write_summary
from servekit.cli._bench_sessions import sessions_input
from servekit.cli._bench_trace import trace_input
from servekit.cli._output import (
    check_load_options,
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
    stdout_console,
)
from servekit.cli._values import FiniteFloat, parse_numbers, read_text_option
from servekit.cli.sim_fit import fit_command
from servekit.cli.sim_serve import serve_command
from servekit.profiles import Profile, load_profile
from servekit.report.tables import points_table
from servekit.results.summary import SessionInfo, TraceInfo, Workload
from servekit.sim.build import build_engine
from servekit.sim.offline import AnyPoint, LoadPoint
from servekit.sim.sweep import simulate_sweep, sweep_summary
from servekit.sim.traffic import SessionsPoint, TracePoint
from servekit.workload.sessions import SessionsSpec
from servekit.workload.tools import parse_tools
from servekit.workload.traces import TRACE_FORMATS, implied_hit_rate


@click.group("sim")
def sim_group() -> None:
    """The built-in vLLM engine simulator."""


# fmt: off
@sim_group.command("run")
@click.option("--profile", "profile_name", required=True, help="Profile to simulate.")
@click.option("--concurrency",
              help="Closed-loop concurrency levels, e.g. 1,4,16,128 (sessions: concurrent "
                   "sessions).")
@click.option("--rate",
              help="Open-loop arrival rates in requests/s, e.g. 0.5,1,2 (inf: all at once; "
                   "sessions: session arrivals/s).")
@click.option("--arrival", default="poisson", show_default=True,
              help="poisson | gamma:SHAPE | constant (with --rate).")
@click.option("--requests-per-point", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--input-len", type=click.IntRange(min=1),
              help="Prompt tokens (sessions: new tokens per synthetic turn) [profile's].")
@click.option("--output-len", type=click.IntRange(min=1), help="Output tokens [profile's].")
@click.option("--temperature", type=FiniteFloat(min=0), default=0.7, show_default=True)
@click.option("--tools", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A JSON list of OpenAI tool definitions (the tools of --agent loops).")
@click.option("--conversations", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Multi-turn sessions from a ShareGPT JSON (every turn) or a JSONL file of "
                   "conversations; --concurrency is then concurrent sessions, --rate sessions/s.")
@click.option("--turns", type=click.IntRange(min=1),
              help="Synthetic sessions of N user turns (--input-len new tokens per turn), or "
                   "the most turns taken from each --conversations session.")
@click.option("--sessions", "sessions_per_point", type=click.IntRange(min=1),
              help="Sessions per point (sessions and agent loops) [16].")
@click.option("--think-time", default="0", show_default=True,
              help="Seconds before each later turn: S, S:exponential or S:uniform.")
@click.option("--agent", is_flag=True,
              help="Agent loops: the model calls a tool (--tools) on each user turn and "
                   "answers after the tool's result, up to --agent-turns responses.")
@click.option("--agent-turns", type=click.IntRange(min=1), default=8, show_default=True,
              help="Most model responses in one agent session.")
@click.option("--tool-latency", default="0.1", show_default=True,
              help="Seconds the client takes to answer a tool call: S, S:exponential or "
                   "S:uniform.")
@click.option("--tool-result", default='{"ok": true}', show_default=True,
              help="The content of every tool result message.")
@click.option("--trace", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Replay a timestamped trace: requests sent at its times, lengths as given.")
@click.option("--trace-format", type=click.Choice(list(TRACE_FORMATS)), default="mooncake",
              show_default=True)
@click.option("--time-scale", type=FiniteFloat(min=1e-6), default=1.0, show_default=True,
              help="Multiply the trace's times (0.5 replays it twice as fast).")
@click.option("--trace-start", type=FiniteFloat(min=0), default=0.0, show_default=True,
              help="Seconds into the trace where the replay starts.")
@click.option("--trace-duration", type=FiniteFloat(min=1e-3),
              help="Seconds of the trace to replay [all].")
@click.option("--max-requests", type=click.IntRange(min=1), help="Most trace requests to send.")
@click.option("--trace-block-tokens", type=click.IntRange(min=1), default=512,
              show_default=True, help="Prompt tokens per Mooncake hash id.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Run directory.")
@click.option("--force", is_flag=True, help="Replace the results of a previous run in --out.")
@set_option
@profiles_dir_option
@json_option
def run_command(
    profile_name: str, out: Path | None, force: bool, overrides: tuple[str, ...],
    profiles_dirs: tuple[str, ...], as_json: bool, **opts: Any,
) -> None:
    # fmt: on
    """Simulate load points offline, far faster than real time.

    Besides fixed-length requests it runs bench's real traffic: a trace replay (--trace),
    multi-turn sessions (--conversations, --turns) and agent loops (--agent), with the
    simulated engine's prefix cache.
    """
    if out is not None:
        check_run_dir(out, RUN_FILES, force=force)  # before the simulation, not after it
    profile = load_profile(profile_name, extra_dirs=profiles_dirs, overrides=overrides)
    sim_input = profile.simulator.input_len if profile.simulator else None
    ilen = opts["input_len"] or sim_input or profile.bench_defaults.input_len
    olen = opts["output_len"] or profile.bench_defaults.output_len
    points, workload = _points(opts, profile, ilen, olen)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    seed = opts["seed"]
    results = simulate_sweep(lambda s: build_engine(profile, seed=s), points, seed=seed)
    summary = sweep_summary(
        results,
        profile_name=profile.name,
        model=profile.serve_args.served_model_name,
        version=__version__,
        started_at=started,
        workload=workload,
    )
    if out is not None:
        with RecordWriter(out, force=force) as writer:
            for result in results:
                for record in result.run.records:
                    writer.write(record)
        write_summary(out, summary)
    if as_json:
        emit_json(summary.as_json())
    else:
        stdout_console().print(points_table(summary.points, title=f"simulated {profile.name}"))


def _points(
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
            trace=TraceInfo(
                file=trace.file,
                format=trace.format,
                requests=len(trace.requests),
                time_scale=trace.time_scale,
                start_s=trace.start_s,
                duration_s=trace.duration_s,
                block_tokens=trace.block_tokens,
                implied_hit_rate=implied_hit_rate(trace),
            ),
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
    levels = [(f"c={int(c)}", int(c), None) for c in parse_numbers(concurrency, int, "--concurrency")]
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
        sessions=_session_info(sessions) if sessions else None,
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


def _session_info(sessions: SessionsSpec) -> SessionInfo:
    """The summary's description of the sessions (as bench gives it)."""
    agent = sessions.agent
    return SessionInfo(
        source=sessions.source,
        sessions=sessions.sessions_per_point,
        turns_max=agent.max_turns if agent else max(len(s.turns) for s in sessions.sessions),
        think_time=sessions.think_time.spelling,
        agent=agent is not None,
        tool_latency=agent.tool_latency.spelling if agent else None,
    )


def _tool_name(tool: dict[str, Any]) -> str | None:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


sim_group.add_command(serve_command)
sim_group.add_command(fit_command)
