"""`servekit tune`'s options as click decorators (shell): workload, search, verification."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from servekit.cli._traffic_options import session_options, trace_options
from servekit.cli._values import FiniteFloat
from servekit.names import RUNTIMES

Command = TypeVar("Command", bound=Callable[..., Any])

# fmt: off
_WORKLOAD = (
    click.option("--slo", required=True,
                 help="The objective, e.g. 'ttft_p99<=2s,tpot_p50<=25ms' or "
                      "'per_stream_p50>=60tok/s' (ttft, ttfo, tpot, itl, e2e, per_stream; "
                      "mean, p50, p90, p99)."),
    click.option("--load", type=click.Choice(("concurrency", "rate")), default="concurrency",
                 show_default=True, help="The load searched: closed-loop concurrency or an "
                 "open loop's arrival rate (a --trace: its speed)."),
    click.option("--arrival", default="poisson", show_default=True,
                 help="poisson | gamma:SHAPE | constant (--load rate)."),
    click.option("--input-len", type=click.IntRange(min=1), help="Prompt tokens [profile's]."),
    click.option("--output-len", type=click.IntRange(min=1), help="Output tokens [profile's]."),
    click.option("--temperature", type=FiniteFloat(min=0), default=0.0, show_default=True),
    click.option("--requests-per-point", type=click.IntRange(min=1), default=256,
                 show_default=True, help="Requests per load point at full fidelity (a closed "
                 "loop: at least 4 x its concurrency)."),
    click.option("--tools", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="A JSON list of OpenAI tool definitions (--agent loops)."),
)
_SEARCH = (
    click.option("--space", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="A YAML file replacing dimensions of the default space (docs/tune.md)."),
    click.option("--calibrate", multiple=True,
                 type=click.Path(exists=True, file_okay=False, path_type=Path),
                 help="A measured run directory (bench) to fit the simulator on (repeatable)."),
    click.option("--finalists", type=click.IntRange(min=1, max=50), default=5,
                 show_default=True, help="Candidates simulated over their whole load ladder."),
    click.option("--seed", type=int, default=0, show_default=True),
)
_VERIFY = (
    click.option("--verify", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Launch the best N candidates on the real engine, one at a time, and "
                      "measure them."),
    click.option("--verify-bound", type=FiniteFloat(min=0.01, max=10), default=0.15,
                 show_default=True, help="Largest |predicted / measured goodput - 1| that "
                 "needs no refit of the simulator."),
    click.option("--max-rounds", type=click.IntRange(min=1, max=10), default=2,
                 show_default=True, help="Search rounds at most: the first, then one per "
                 "refit."),
    click.option("--max-points", type=click.IntRange(min=1, max=20), default=3,
                 show_default=True, help="Load levels measured per verified candidate at most."),
    click.option("--budget-s", type=FiniteFloat(min=1), help="Seconds the whole run may take."),
    click.option("--start-estimate-s", type=FiniteFloat(min=0), default=120.0,
                 show_default=True, help="Seconds one engine start is expected to take (the "
                 "budget check)."),
    click.option("--runtime", type=click.Choice(RUNTIMES), default="process", show_default=True,
                 help="How candidates are launched (as servekit up)."),
    click.option("--launcher", type=click.Choice(("auto", "module", "vllm")), default="auto",
                 show_default=True, help="The process runtime's launcher (as servekit up)."),
    click.option("--python", "python", default=sys.executable,
                 show_default="this interpreter", help="Interpreter for --launcher module."),
    click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                 help="The launcher's state directory [$SERVEKIT_STATE_DIR]."),
    click.option("--engine-cpus", help="CPUs the engine runs on, e.g. 1 or 2-7 (process runtime; "
                 "a timing run keeps its client, this process, on the others)."),
    click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True,
                 help="Requests sent before each measured point."),
    click.option("--timeout", type=FiniteFloat(min=0.1), default=600.0, show_default=True,
                 help="Seconds one measured request may take."),
    click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
                 help="Environment variable holding the engine's API key (never written)."),
)
_OUTPUT = (
    click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
                 help="Output directory: tune.json, the winner's profile, the journal, runs."),
    click.option("--resume", is_flag=True, help="Continue the run journaled in --out."),
    click.option("--force", is_flag=True, help="Replace an earlier run's results in --out."),
)
# fmt: on


def tune_options(command: Command) -> Command:
    """Every option of `servekit tune` but the profile's and --json."""
    for option in reversed((*_WORKLOAD, *_SEARCH, *_VERIFY, *_OUTPUT)):
        command = option(command)
    return session_options(trace_options(command))
