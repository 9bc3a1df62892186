"""The simulator's calibration in one tune run (shell: it reads run directories).

Round 0 is fitted by `sim.calibrate` on the `--calibrate` run directories (each point under
the deployment it measured), or uses the profile's own coefficients; every point that
verification measures on the real engine joins the training points, so a refit round is
fitted on the calibration points plus every verification point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servekit.bench.run_points import read_runs
from servekit.errors import ConfigError, ServekitError
from servekit.profiles.schema import Profile
from servekit.sim.build import profile_acceptance, profile_step_params
from servekit.sim.calibrate import RunPoint, acceptance_params, calibrate
from servekit.tune.evaluate import SimModel
from servekit.tune.spec import TuneSpec


class Calibration:
    """The points the simulator is fitted on, and the model each round fits on them.

    `variants` maps the candidates' profile names to their profiles (a verification
    point is fitted under the candidate's deployment).
    """

    def __init__(self, spec: TuneSpec, variants: Mapping[str, Profile]) -> None:
        self.spec = spec
        self.variants = variants
        self.training: list[RunPoint] = []
        self._run_profiles: dict[str, str | None] = {}

    def _profile_of_point(self, point: RunPoint) -> Profile:
        name = self._run_profiles.get(point.source)
        if name is not None and name in self.variants:
            return self.variants[name]
        known = self.spec.profile_of_run(name) if name else None
        if known is not None:
            return known
        base = self.spec.profile
        drafts = point.server.spec_acceptance_per_position or point.server.spec_acceptance_length
        if drafts and base.speculative is None:
            raise ConfigError(
                f"{point.source} speculated, but {base.name} has no speculative section",
                fix="calibrate on runs of the profile's deployment",
            )
        if not drafts and base.speculative is not None:
            return base.model_copy(update={"speculative": None})
        return base

    def read(self) -> None:
        """Read the `--calibrate` run directories' points."""
        for run_dir in self.spec.calibrate:
            points, _ = read_runs([run_dir])
            self._note_profiles(run_dir)
            self.training += points

    def _note_profiles(self, run_dir: Path) -> None:
        from servekit.bench.store import read_summary

        self._run_profiles[str(run_dir)] = read_summary(run_dir).target.profile

    def model(self, round_: int) -> tuple[SimModel, dict[str, Any]]:
        """Round `round_`'s simulator model, and its facts as tune.json states them."""
        profile = self.spec.profile
        if not self.training:
            model = SimModel(profile_step_params(profile), None, "the profile's coefficients")
            return model, {
                "round": round_,
                "source": model.source,
                "step": dataclasses.asdict(model.step),
            }
        cal = calibrate(
            profile, self.training, seed=self.spec.seed, profile_of=self._profile_of_point
        )
        accept = acceptance_params(cal.acceptance) or None
        if accept is None and profile.speculative is not None:
            accept = profile_acceptance(profile)
        n = len(self.training)
        source = f"fitted on {n} measured point{'s' if n != 1 else ''}"
        model = SimModel(cal.steps.params, accept, source)
        undetermined = [e.name for e in cal.steps.estimates if not e.determined]
        return model, {
            "round": round_,
            "source": source,
            "step": dataclasses.asdict(cal.steps.params),
            "acceptance": list(cal.acceptance.probabilities) if cal.acceptance else None,
            "fitted_points": n,
            "fit_rms_ms": round(cal.steps.rms_ms, 4),
            "undetermined": undetermined,
        }

    def learn(self, run_dir: Path, profile: Profile) -> None:
        """Add the points of a run directory verification measured (every measured point
        trains the next round's refit)."""
        if (run_dir / "records.jsonl").is_file():
            try:
                points, _ = read_runs([run_dir])
            except ServekitError:
                points = []
            self._run_profiles[str(run_dir)] = profile.name
            self.training += [
                p for p in points if p.source not in {t.source for t in self.training}
            ]
