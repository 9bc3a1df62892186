"""Measure candidates on the real engine (shell): one engine at a time, stopped exactly.

`Engines` starts a candidate's engine with servekit's launcher (`servekit up`'s runtimes:
a local process group or a container) beside a watchdog that stops it if this process is
killed, follows it to /health 200, and stops exactly what it started before the next
candidate's. `measure_point` runs one load level with `servekit bench`'s runner into a run
directory of its own and judges it against the SLO with the simulator's own code.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servekit import __version__
from servekit.analyze.slo import Slo
from servekit.bench.spec import BenchSpec, PointSpec, bench_points, bench_spec
from servekit.bench.store import read_records
from servekit.bench.summary import run_bench
from servekit.client.address import server_address
from servekit.errors import LaunchError, ServekitError
from servekit.profiles.schema import Profile
from servekit.runtime.control import stop
from servekit.runtime.follow import wait_until_ready
from servekit.runtime.launch import engine_url, not_ready_error, start_engine
from servekit.runtime.state import EngineState, read_state, remove_state
from servekit.runtime.watchdog import start_watchdog
from servekit.tune.evaluate import LoadResult, Simulator, judge_records
from servekit.tune.journal import Journal
from servekit.tune.workload import TuneWorkload


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """How candidates are launched and loaded on the real engine.

    Attributes:
        runtime: "process" or "docker" (`servekit up --runtime`).
        launcher: the process runtime's launcher (`servekit up --launcher`).
        python: the interpreter of the module launcher.
        state_dir: the launcher's state directory.
        api_key_env: environment variable holding the API key, if the engine needs one.
        warmup: requests sent before each measured point (not counted).
        timeout_s: seconds one request may take.
        cpus: CPUs the engine runs on (process runtime), None: anywhere.
    """

    runtime: str
    launcher: str
    python: str
    state_dir: Path
    api_key_env: str = "OPENAI_API_KEY"
    warmup: int = 2
    timeout_s: float = 600.0
    cpus: frozenset[int] | None = None


class Engines:
    """The one engine running for tune, if any."""

    def __init__(
        self, options: EngineOptions, journal: Journal, say: Callable[[str], None]
    ) -> None:
        self.options = options
        self.journal = journal
        self.say = say
        self.state: EngineState | None = None
        self.candidate: str | None = None
        self.startup_s: float | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    def ensure(self, candidate: str, profile: Profile, timeout_s: float) -> EngineState:
        """The candidate's engine, started (and the previous one stopped) when needed.

        Raises:
            LaunchError: it did not start or become ready in `timeout_s`.
        """
        if self.state is not None and self.candidate == candidate:
            return self.state
        self.stop()
        directory = self.options.state_dir
        self.journal.write("engine_start", profile=profile.name, candidate=candidate)
        self.say(f"starting {candidate} ({profile.name})")
        started = time.monotonic()
        state = start_engine(
            profile,
            directory,
            runtime=self.options.runtime,
            launcher=self.options.launcher,
            python=self.options.python,
        )
        self.state, self.candidate = state, candidate
        self._watchdog = start_watchdog(state, directory)
        outcome = wait_until_ready(state, timeout_s=timeout_s, on_stage=lambda *_: None)
        if not outcome.ready:
            error = not_ready_error(state, outcome, directory)
            self.stop()
            raise error
        self.startup_s = time.monotonic() - started
        self.say(f"{candidate} ready after {self.startup_s:.0f} s")
        return state

    def stop(self) -> None:
        """Stop the running engine (if any) exactly, and its watchdog."""
        state, self.state = self.state, None
        if state is not None:
            directory = self.options.state_dir
            if read_state(directory, state.profile) is not None:
                stop(state, grace_s=30.0)
                remove_state(directory, state.profile)
            self.journal.write(
                "engine_stop",
                profile=state.profile,
                candidate=self.candidate,
                startup_s=self.startup_s,
            )
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            try:
                watchdog.wait(timeout=5)  # it sees the state gone and exits
            except subprocess.TimeoutExpired:
                watchdog.kill()
                watchdog.wait()


def stop_leftovers(state_dir: Path, profiles: list[str], say: Callable[[str], None]) -> None:
    """Stop engines an earlier, killed tune started and never stopped (by their state)."""
    for name in profiles:
        state = read_state(state_dir, name)
        if state is None:
            continue
        said = stop(state, grace_s=10.0)
        remove_state(state_dir, name)
        say(f"stopped {name}, left by the earlier run: {said}")


def bench_inputs(
    workload: TuneWorkload, profile: Profile, load: float, requests: int, options: EngineOptions
) -> tuple[BenchSpec, PointSpec]:
    """bench's spec and point for one load level of the workload on a candidate's engine."""
    address = server_address(
        engine_url(profile),
        api_key=os.environ.get(options.api_key_env),
        key_name=options.api_key_env,
    )
    model = profile.serve_args.served_model_name or profile.model.path
    n = Simulator.requests_at(workload, load, requests)
    replayed = workload.trace is not None or workload.sessions is not None
    target = BenchSpec(
        base_url=address.base_url,
        model=model,
        warmup=0 if replayed else options.warmup,
        headers=address.headers,
        redactor=address.redactor,
        timeout_s=options.timeout_s,
    )
    at_level = workload.load_at(load, n)
    point = bench_points(at_level)[0]
    if workload.trace is None:  # tune's own label of a searched level (a trace's is "trace")
        point = dataclasses.replace(point, label=workload.label(load))
    return bench_spec(at_level, target), point


def measure_point(
    engine: EngineState,
    profile: Profile,
    workload: TuneWorkload,
    slo: Slo,
    load: float,
    requests: int,
    run_dir: Path,
    options: EngineOptions,
) -> LoadResult:
    """Run one load level against the engine and judge it (failures are part of it).

    Raises:
        Interrupted: Ctrl-C or SIGTERM (the records so far are kept).
        ServekitError: the run could not be made (the engine went away, a bad directory).
    """
    spec, point = bench_inputs(workload, profile, load, requests, options)
    if engine.url.rstrip("/") != spec.base_url.rstrip("/"):
        raise LaunchError(
            f"the engine answers at {engine.url}, not {spec.base_url}",
            fix="check the profile's deploy.port and bind_host",
        )
    run_bench(
        spec,
        [point],
        run_dir,
        version=__version__,
        profile=profile.name,
        max_failure_rate=1.0,
        force=True,
    )
    records = [r for r in read_records(run_dir) if r.point == point.label]
    if not records:
        raise ServekitError(
            f"{run_dir}: the point {point.label} has no records", fix="read the run's summary.json"
        )
    return judge_records(records, slo, load=load, replicas=1, requests=spec.requests_per_point)
