"""`servekit tune` (shell): calibrate, search the settings in simulation, verify the winners."""

from __future__ import annotations

from typing import Any

import click

from servekit.cli._output import emit_json, json_option, profiles_dir_option, set_option
from servekit.cli._tune_options import tune_options


@click.command("tune")
@click.argument("profile")
@tune_options
@set_option
@profiles_dir_option
@json_option
def tune_command(profile: str, as_json: bool, **opts: Any) -> None:
    """Find the settings that serve the most requests per GPU within an SLO: search in
    simulation, verify on the engine.

    Every candidate (max_num_seqs, max_num_batched_tokens, speculation and its per-batch
    schedule, gpu_memory_utilization, the CUDA-graph estimate flag, TP x DP, prefix caching,
    chunked prefill, max_model_len) is planned; the feasible ones are searched in the
    calibrated simulator by successive halving, each at its highest SLO-meeting load; with
    --verify N the best are launched and measured one at a time, and the simulator is
    refitted when it was off by more than --verify-bound. Writes tune.json, the winner as a
    profile extending PROFILE with its launch command, and a report (OUT/report).
    """
    from servekit.cli._tune_spec import tune_spec
    from servekit.report.build import write_report
    from servekit.report.tune_view import TerminalEvents, print_tune
    from servekit.tune.run import run_tune

    spec = tune_spec(profile, opts)
    events = TerminalEvents(quiet=as_json)
    doc = run_tune(spec, events)
    write_report([], spec.out / "report", tune=doc)
    if as_json:
        emit_json(doc.as_json())
    else:
        print_tune(doc, spec.out)
