"""The search side of one tune run (shell: it times each round): the candidate pool,
planned once, and each round's search over it in the simulator (`tune.search`).

The input profile as the user gave it (`as_is`, its own settings unchanged) is planned
with the pool, the space's own candidate when the space holds it, and simulated in each
round under that round's model at the full request count, as the finalists are: the winner
is set against it like for like. It is not added to the search: the space is the user's.

After a refit, the candidates verified in earlier rounds are simulated once more under the
last round's model, so tune.json holds the last model's view of each in full.
"""

from __future__ import annotations

import dataclasses
import time

from servekit.errors import ConfigError
from servekit.hardware import lookup_gpu
from servekit.plan import plan_inputs
from servekit.profiles.schema import Profile
from servekit.tune.baseline import Baseline
from servekit.tune.document import SearchRound, VerifiedCandidate
from servekit.tune.evaluate import SimModel, Simulator
from servekit.tune.search import Candidate, SearchResult, candidates, search
from servekit.tune.space import as_is_settings
from servekit.tune.spec import Events, TuneSpec


class SearchRounds:
    """The candidate pool, the profiles of its variants by name, the rounds searched, and
    the input profile as it is (`as_is`, once planned)."""

    def __init__(self, spec: TuneSpec, events: Events) -> None:
        self.spec = spec
        self.events = events
        self.pool: list[Candidate] = []
        self.variants: dict[str, Profile] = {}
        self.rounds: list[SearchRound] = []
        self.as_is: Baseline | None = None

    def plan(self) -> None:
        """Plan every candidate of the space.

        Raises:
            ConfigError: none of them can run.
        """
        spec = self.spec
        self.events.say(f"planning {spec.space.size:,} candidates")
        self.pool = candidates(spec.profile, list(spec.space.candidates()))
        for c in self.pool:
            if c.feasibility.profile is not None:
                self.variants[c.feasibility.profile.name] = c.feasibility.profile
        feasible = sum(1 for c in self.pool if c.feasibility.feasible)
        if not feasible:
            reasons = sorted({c.feasibility.reason or "" for c in self.pool})
            raise ConfigError(
                f"none of the {len(self.pool):,} candidates can run: {reasons[0]}"
                + (f" (and {len(reasons) - 1} other reasons)" if len(reasons) > 1 else ""),
                fix="widen the space (--space) or use more GPUs",
            )
        self.events.say(f"{feasible:,} of {len(self.pool):,} candidates are feasible")
        self.as_is = self._baseline()

    def _baseline(self) -> Baseline:
        """The input profile as it is: the space's candidate of its settings, or planned
        beside the pool (its variant known by name, for the calibration)."""
        profile = self.spec.profile
        accounting = plan_inputs(profile, lookup_gpu(profile.hardware.gpu)).accounting
        estimate = (
            accounting.estimate_cudagraphs(profile.env)
            if accounting.estimate_cudagraphs_env
            else None
        )
        settings = as_is_settings(
            profile, estimate_cudagraphs=estimate, needed_len=self.spec.workload.needed_len()
        )
        for c in self.pool:
            if c.settings == settings:
                return Baseline(c, in_space=True)
        (c,) = candidates(profile, [settings])
        if c.feasibility.profile is not None:
            self.variants.setdefault(c.feasibility.profile.name, c.feasibility.profile)
        return Baseline(c, in_space=False)

    def search_round(self, model: SimModel, round_: int) -> SearchResult:
        """Search the pool in the simulator under `model` (one round)."""
        spec = self.spec
        self.events.say(f"searching in the simulator ({model.source})")
        sim = Simulator(spec.workload, spec.slo, model, seed=spec.seed)
        t0 = time.monotonic()
        result = search(
            spec.profile,
            [],
            sim,
            finalists=spec.finalists,
            progress=self.events.progress,
            pool=self.pool,
        )
        wall = time.monotonic() - t0
        as_is = None  # the input profile as it is, like the finalists: the full request count
        if self.as_is is not None and self.as_is.candidate.feasibility.feasible:
            as_is = sim.search(self.as_is.candidate.replica(), spec.workload.requests)
        self.rounds.append(SearchRound(round_, result, wall, model, as_is))
        self.events.say(
            f"round {round_}: {result.simulated:,} points simulated, {result.reused:,} reused, "
            f"in {wall:.1f} s"
        )
        return result

    def final_views(self, verified: dict[str, VerifiedCandidate]) -> None:
        """After a refit, each candidate verified in an earlier round as the last round's
        model sees it, in full."""
        spec = self.spec
        if len(self.rounds) > 1 and verified:  # the last model's view of each, in full
            last = self.rounds[-1]
            sim = Simulator(spec.workload, spec.slo, last.model, seed=spec.seed)
            by_id = {c.ident: c for c in self.pool}
            for f in last.result.finalists:
                by_id.setdefault(f.candidate.ident, f.candidate)
            for ident, v in verified.items():
                if v.round < last.round and ident in by_id:
                    final = sim.search(by_id[ident].replica(), spec.workload.requests)
                    verified[ident] = dataclasses.replace(v, final=(final, last.round))
