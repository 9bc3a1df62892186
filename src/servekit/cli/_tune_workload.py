"""`servekit tune`'s workload options as a Load and a TuneWorkload (shell): lengths,
sessions, a trace, read by the same `traffic_load` bench uses."""

from __future__ import annotations

from typing import Any

from servekit.cli._load import traffic_load
from servekit.cli._load_options import LoadOptions
from servekit.profiles.schema import Profile
from servekit.tune.workload import TuneWorkload
from servekit.workload.load import Load


def tune_load(profile: Profile, opts: dict[str, Any]) -> Load:
    """The load the options describe; its levels are none (tune searches them)."""
    sim_input = profile.simulator.input_len if profile.simulator else None
    ilen = opts["input_len"] or sim_input or profile.bench_defaults.input_len
    olen = opts["output_len"] or profile.bench_defaults.output_len
    return traffic_load(
        LoadOptions.of(opts),
        command="tune",
        max_model_len=profile.serve_args.max_model_len,
        lens=(ilen, olen),
        requests_per_point=opts["requests_per_point"],
    )


def tune_workload(profile: Profile, opts: dict[str, Any]) -> TuneWorkload:
    """The workload the options describe, searched over load levels of `--load`."""
    return TuneWorkload.of(tune_load(profile, opts), opts["load"])
