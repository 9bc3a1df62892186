"""What one `servekit tune` run is asked to do (shell: plain values, but a verification's
engine options are `tune.measure`'s): the run's spec, its verification options, and the
events it reports while it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from servekit.analyze.slo import Slo
from servekit.profiles.schema import Profile
from servekit.tune.measure import EngineOptions
from servekit.tune.space import Space
from servekit.tune.workload import TuneWorkload


class Events(Protocol):
    """What tune reports while it runs (the CLI draws it; tests record it)."""

    def say(self, text: str) -> None:
        """A line of news."""

    def progress(self, stage: str, done: int, total: int) -> None:
        """Progress of a stage of the search."""


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    """Verification on the real engine.

    Attributes:
        count: candidates to verify (0: simulation only).
        bound: largest |predicted / measured goodput - 1| that needs no refit.
        max_rounds: search rounds at most (the first plus refits).
        max_points: load levels measured per candidate at most.
        start_estimate_s: seconds an engine start is expected to take (budget check).
        engine: how engines are launched and loaded.
    """

    count: int
    engine: EngineOptions | None = None
    bound: float = 0.15
    max_rounds: int = 2
    max_points: int = 3
    start_estimate_s: float = 120.0


@dataclass(frozen=True, slots=True)
class TuneSpec:
    """One `servekit tune` run.

    Attributes:
        profile: the deployment to tune.
        extends: how the winner's profile names it (`extends:`), a name or a path.
        slo: the objective.
        workload: the load.
        space: the candidates.
        out: the output directory.
        calibrate: run directories to calibrate the simulator on.
        verify: verification on the real engine.
        budget_s: wall seconds the whole run may take (None: no limit).
        seed: seed of every simulation.
        finalists: candidates simulated over their whole ladder.
        resume: continue the run journaled in `out`.
        force: replace an earlier run's results in `out`.
        profile_of_run: the deployment a calibration run measured, by its profile name
            (None: the input profile, speculation as the run's counters show).
    """

    profile: Profile
    extends: str
    slo: Slo
    workload: TuneWorkload
    space: Space
    out: Path
    calibrate: tuple[Path, ...] = ()
    verify: VerifyOptions = field(default_factory=lambda: VerifyOptions(0))
    budget_s: float | None = None
    seed: int = 0
    finalists: int = 5
    resume: bool = False
    force: bool = False
    profile_of_run: Callable[[str], Profile | None] = lambda _: None
