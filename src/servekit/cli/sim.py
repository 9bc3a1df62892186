"""`servekit sim run` (shell): simulate a sweep offline and write records and a summary."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
    stdout_console,
)
from servekit.cli._traffic_options import session_options, trace_options
from servekit.cli._values import FiniteFloat
from servekit.cli.sim_fit import fit_command
from servekit.cli.sim_serve import serve_command


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
@session_options
@trace_options
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--slo", help="The SLO, as bench and tune take it, e.g. 'ttft_p99<=500ms,"
              "tpot_p99<=50ms': goodput counts the requests within every bound.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Run directory.")
@click.option("--force", is_flag=True, help="Replace the results of a previous run in --out.")
@set_option
@profiles_dir_option
@json_option
def run_command(
    profile_name: str, out: Path | None, force: bool, overrides: tuple[str, ...],
    profiles_dirs: tuple[str, ...], as_json: bool, slo: str | None, **opts: Any,
) -> None:
    # fmt: on
    """Simulate load points offline, far faster than real time.

    Besides fixed-length requests it runs bench's real traffic: a trace replay (--trace),
    multi-turn sessions (--conversations, --turns) and agent loops (--agent), with the
    simulated engine's prefix cache.
    """
    from servekit import __version__
    from servekit.analyze.slo import parse_slo
    from servekit.bench.store import RUN_FILES, RecordWriter, check_run_dir, write_summary
    from servekit.cli._sim_points import sim_load, sim_workload
    from servekit.profiles import load_profile
    from servekit.report.tables import summary_tables
    from servekit.sim.build import build_engine
    from servekit.sim.load_points import sim_points
    from servekit.sim.sweep import simulate_sweep, sweep_summary
    objectives = parse_slo(slo, option="--slo") if slo else None
    if out is not None:
        check_run_dir(out, RUN_FILES, force=force)  # before the simulation, not after it
    profile = load_profile(profile_name, extra_dirs=profiles_dirs, overrides=overrides)
    sim_input = profile.simulator.input_len if profile.simulator else None
    ilen = opts["input_len"] or sim_input or profile.bench_defaults.input_len
    olen = opts["output_len"] or profile.bench_defaults.output_len
    load = sim_load(opts, profile, ilen, olen)
    points, workload = sim_points(load), sim_workload(load)
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
        slo=objectives,
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
        stdout_console().print(*summary_tables(summary.points, title=f"simulated {profile.name}"))


sim_group.add_command(serve_command)
sim_group.add_command(fit_command)
