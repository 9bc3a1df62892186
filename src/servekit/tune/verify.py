"""Verification on the real engine in one tune run (shell): the budget, and each round's
leaders launched one at a time (`tune.measure`).

Each candidate is measured at its predicted SLO-meeting load and the loads next to it, up
to `max_points`: up while it meets the SLO, down while it misses. Points measured before
(the journal, `--resume`) are not measured again; every point measured trains the next
round's refit (`tune.calibration`). The input profile as it is is measured the same way
after the first round's leaders (`verify_as_is`), unless it is one of them or the budget
is spent, so that the winner is set against it measured as well as predicted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servekit.errors import Interrupted, ServekitError, UsageError
from servekit.profiles.schema import Profile
from servekit.results.tune import LoadBlock
from servekit.tune.baseline import Baseline
from servekit.tune.calibration import Calibration
from servekit.tune.document import VerifiedCandidate, load_block
from servekit.tune.evaluate import Evaluation
from servekit.tune.journal import MeasuredPoints
from servekit.tune.measure import Engines, measure_point
from servekit.tune.search import Candidate, Scored, SearchResult
from servekit.tune.spec import Events, TuneSpec


class Verifier:
    """The candidates verified so far (`verified`, by id), and how to verify more."""

    def __init__(
        self,
        spec: TuneSpec,
        events: Events,
        measured: MeasuredPoints,
        calibration: Calibration,
        elapsed: Callable[[], float],
    ) -> None:
        self.spec = spec
        self.events = events
        self.measured = measured
        self.calibration = calibration
        self.elapsed = elapsed
        self.verified: dict[str, VerifiedCandidate] = {}

    def _need_s(self, result: SearchResult, ident: str) -> float:
        """Predicted seconds to verify one candidate: its start and its points."""
        scored = result.scores.get(ident)
        return self._need_of(scored.evaluation if scored is not None else None)

    def _need_of(self, evaluation: Evaluation | None) -> float:
        """Predicted seconds to verify a candidate so evaluated: its start and its points."""
        at = evaluation.at if evaluation is not None else None
        per_point = at.duration_s if at is not None and at.duration_s else 60.0
        options = self.spec.verify
        return options.start_estimate_s + options.max_points * per_point

    def over_budget(self, need_s: float = 0.0) -> bool:
        """Whether `need_s` more seconds would overrun `--budget-s`."""
        budget = self.spec.budget_s
        return budget is not None and self.elapsed() + need_s > budget

    def check_budget(self, result: SearchResult) -> None:
        """Refuse a budget too small to verify the first round's leaders.

        Raises:
            UsageError: they need more than is left of `--budget-s`.
        """
        spec = self.spec
        if spec.budget_s is None or not spec.verify.count:
            return
        top = [f.candidate.ident for f in result.finalists[: spec.verify.count]]
        need = sum(self._need_s(result, i) for i in top)
        if self.elapsed() + need > spec.budget_s:
            first = self._need_s(result, top[0]) if top else 0.0
            raise UsageError(
                f"--budget-s {spec.budget_s:g} cannot verify {len(top)} candidate(s): they "
                f"need about {need:.0f} s ({spec.verify.start_estimate_s:g} s to start each "
                f"engine, --start-estimate-s, and up to {spec.verify.max_points} measured "
                f"points each) after {self.elapsed():.0f} s of search",
                fix=f"give --budget-s {self.elapsed() + need:.0f} or more, or --verify "
                f"{max(int((spec.budget_s - self.elapsed()) // max(first, 1.0)), 0)}",
            )

    def verify_round(
        self, engines: Engines, result: SearchResult, round_: int, model_source: str
    ) -> int:
        """Verify this round's top candidates not yet verified (their prediction made by the
        model `model_source` names); returns how many."""
        count = self.spec.verify.count
        ranked = [f.candidate for f in result.finalists]
        chosen = [c for c in ranked if c.ident not in self.verified][:count]
        if round_ == 0:
            chosen = ranked[:count]
        done = 0
        for candidate in chosen:
            if candidate.ident in self.verified:
                continue
            need = self._need_s(result, candidate.ident)
            if self.over_budget(need):
                self.events.say(f"skipping {candidate.ident}: the budget is spent")
                continue
            scored = result.scores[candidate.ident]
            self.verified[candidate.ident] = self._verify(
                engines, candidate, scored, round_, model_source
            )
            done += 1
        return done

    def verify_as_is(
        self,
        engines: Engines,
        baseline: Baseline,
        evaluation: Evaluation | None,
        round_: int,
        model_source: str,
    ) -> int:
        """Measure the input profile as it is (predicted `evaluation` by the model
        `model_source` names), unless it was measured already, cannot run, or the budget is
        spent; returns 1 when measured, else 0."""
        candidate = baseline.candidate
        if candidate.ident in self.verified or evaluation is None:
            return 0
        if self.over_budget(self._need_of(evaluation)):
            self.events.say(f"skipping your profile as-is ({candidate.ident}): the budget is spent")
            return 0
        self.events.say(
            f"measuring your profile as-is ({candidate.ident}) to set the winner against"
        )
        scored = Scored(candidate, evaluation, 0)
        self.verified[candidate.ident] = self._verify(
            engines, candidate, scored, round_, model_source
        )
        return 1

    def _verify(
        self, engines: Engines, candidate: Candidate, scored: Any, round_: int, model_source: str
    ) -> VerifiedCandidate:
        spec = self.spec
        profile = candidate.feasibility.profile
        assert profile is not None
        evaluation = scored.evaluation
        workload = spec.workload
        dp = candidate.settings.data_parallel_size
        cap = candidate.settings.max_num_seqs * dp
        step = float(dp)
        load = evaluation.load if evaluation.load is not None else (1.0 * dp)
        if not workload.integer_load and evaluation.load is None:
            load = (evaluation.tried[0].load if evaluation.tried else 1.0) / 64
        points: list[LoadBlock] = []
        best: LoadBlock | None = None
        last_met = False
        startup = None
        detail = None
        try:
            tried: set[float] = set()
            direction = 0
            while len(points) < spec.verify.max_points:
                result = self._measure(engines, candidate, profile, load, round_)
                startup = engines.startup_s if engines.candidate == candidate.ident else startup
                tried.add(load)
                points.append(result)
                if result.met:
                    last_met = True
                    if best is None or result.request_rps > best.request_rps:
                        best = result
                    if direction < 0:
                        break
                    direction = 1
                    nxt = load + step if workload.integer_load else load * 1.15
                    if workload.integer_load and nxt > cap:
                        break
                else:
                    last_met = False
                    if direction > 0:
                        break
                    direction = -1
                    nxt = load - step if workload.integer_load else load / 1.15
                    if nxt < (step if workload.integer_load else load / 64):
                        break
                if nxt in tried:
                    break
                load = nxt
        except Interrupted:
            raise
        except ServekitError as exc:
            detail = exc.message
            self.events.say(f"{candidate.ident}: {detail}")
        finally:
            engines.stop()
        return VerifiedCandidate(
            ident=candidate.ident,
            round=round_,
            predicted=(evaluation, round_),
            model_source=model_source,
            fitted_on_own=False,
            points=tuple(points),
            best=best,
            lower_bound=bool(points) and last_met and len(points) >= spec.verify.max_points,
            gpus=candidate.replica().gpus,
            startup_s=startup,
            failed=detail,
        )

    def _measure(
        self, engines: Engines, candidate: Candidate, profile: Profile, load: float, round_: int
    ) -> LoadBlock:
        cached = self.measured.get(candidate.ident, load)
        run_dir = self.spec.out / "verify" / candidate.ident / self.spec.workload.label(load)
        if cached is not None:
            self.events.say(
                f"{candidate.ident} at {self.spec.workload.label(load)}: measured before (journal)"
            )
            block = LoadBlock.model_validate(cached)
        else:
            remaining = None
            if self.spec.budget_s is not None:
                remaining = max(self.spec.budget_s - self.elapsed(), 1.0)
            timeout = float(profile.deploy.startup_timeout_s)
            state = engines.ensure(
                candidate.ident, profile, min(timeout, remaining) if remaining else timeout
            )
            self.events.say(f"{candidate.ident}: measuring {self.spec.workload.label(load)}")
            result = measure_point(
                state,
                profile,
                self.spec.workload,
                self.spec.slo,
                load,
                self.spec.workload.requests,
                run_dir,
                engines.options,
            )
            block = load_block(result, run_dir=str(run_dir))
            self.measured.add(candidate.ident, load, round_, block)
        self.calibration.learn(run_dir, profile)  # trains the next round's refit
        verdict = "meets" if block.met else "misses"
        self.events.say(
            f"{candidate.ident} at {self.spec.workload.label(load)}: {verdict} the "
            f"SLO, {block.request_rps:.3g} req/s"
        )
        return block
