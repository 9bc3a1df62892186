"""`servekit tune` options as a TuneSpec (shell): profile, SLO, workload, space, verify."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from servekit.analyze.slo import parse_slo
from servekit.cli._tune_workload import tune_workload
from servekit.cli._values import read_text_option
from servekit.errors import UsageError
from servekit.hardware import lookup_gpu
from servekit.plan import plan_inputs
from servekit.profiles import load_profile
from servekit.profiles.loader import available_profiles
from servekit.profiles.schema import Profile
from servekit.profiles.yaml_files import parse
from servekit.runtime.state import state_dir as default_state_dir
from servekit.tune.measure import EngineOptions
from servekit.tune.space import default_space, read_space
from servekit.tune.spec import TuneSpec, VerifyOptions


def tune_spec(profile_ref: str, opts: dict[str, Any]) -> TuneSpec:
    """The run the options describe (every problem one UsageError or ConfigError line)."""
    slo = parse_slo(opts["slo"], option="--slo")
    dirs = opts["profiles_dirs"]
    profile = load_profile(profile_ref, extra_dirs=dirs, overrides=opts["overrides"])
    workload = tune_workload(profile, opts)
    accounting = plan_inputs(profile, lookup_gpu(profile.hardware.gpu)).accounting
    space = default_space(
        profile,
        graph_flag=accounting.estimate_cudagraphs_env,
        reuse=workload.reuses_prefixes,
        needed_len=workload.needed_len(),
    )
    if opts["space"] is not None:
        path: Path = opts["space"]
        data, _ = parse(read_text_option(path, "--space"), str(path))
        space = read_space(data, str(path), space, profile)
    if space.size == 0:
        raise UsageError("the search space is empty", fix="give every dimension a value")
    verify = _verify(opts)
    if opts["resume"] and opts["force"]:
        raise UsageError("--resume continues a run and --force replaces it", fix="give one")
    return TuneSpec(
        profile=profile,
        extends=_extends(profile_ref, profile, opts["out"]),
        slo=slo,
        workload=workload,
        space=space,
        out=opts["out"],
        calibrate=tuple(opts["calibrate"]),
        verify=verify,
        budget_s=opts["budget_s"],
        seed=opts["seed"],
        finalists=opts["finalists"],
        resume=opts["resume"],
        force=opts["force"],
        profile_of_run=lambda name: _named(name, dirs),
    )


def _named(name: str, dirs: tuple[str, ...]) -> Profile | None:
    """A calibration run's profile by name, when one by that name is found."""
    if name not in available_profiles(dirs):
        return None
    return load_profile(name, extra_dirs=dirs)


def _extends(ref: str, profile: Profile, out: Path) -> str:
    """How the winner's profile (in `out`) names the input profile."""
    if ref.endswith((".yaml", ".yml")) or os.sep in ref:
        return os.path.relpath(Path(ref).resolve(), out.resolve())
    return profile.name


def parse_cpus(text: str) -> frozenset[int]:
    """A CPU list as taskset writes it: 1, 0,2 or 2-7.

    Raises:
        UsageError: not such a list, or a CPU this machine does not have.
    """
    cpus: set[int] = set()
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UsageError(f"--engine-cpus {text!r} is not a CPU list", fix="write e.g. 1 or 2-7")
        cpus.update(range(int(low), int(high if sep else low) + 1))
    have = os.sched_getaffinity(0) | set(range(os.cpu_count() or 1))
    if not cpus or not cpus <= have:
        raise UsageError(
            f"--engine-cpus {text!r} names CPUs this machine does not have",
            fix=f"use CPUs of 0-{max(have)}",
        )
    return frozenset(cpus)


def _verify(opts: dict[str, Any]) -> VerifyOptions:
    count = opts["verify"]
    engine = None
    if count:
        engine = EngineOptions(
            runtime=opts["runtime"],
            launcher=opts["launcher"],
            python=opts["python"],
            state_dir=opts["state_dir"] or default_state_dir(None),
            api_key_env=opts["api_key_env"],
            warmup=opts["warmup"],
            timeout_s=opts["timeout"],
            cpus=parse_cpus(opts["engine_cpus"]) if opts["engine_cpus"] else None,
        )
    return VerifyOptions(
        count=count,
        engine=engine,
        bound=opts["verify_bound"],
        max_rounds=opts["max_rounds"],
        max_points=opts["max_points"],
        start_estimate_s=opts["start_estimate_s"],
    )
