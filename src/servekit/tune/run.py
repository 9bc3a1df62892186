"""`servekit tune` end to end (shell): calibrate, search, verify on the engine, refit, write.

1. The simulator's calibration (round 0): `--calibrate` run directories fitted by
   `sim.calibrate` (each point under the deployment it measured), or the profile's own
   coefficients.
2. Every candidate of the space planned; the feasible ones searched (`tune.search`).
3. With `--verify N`: the top N launched one at a time (`tune.measure`), each measured at
   its predicted SLO-meeting load and the loads next to it, up to `max_points`; the
   measured goodput set against the predicted one. When an error exceeds the bound, the
   simulator is refitted on the calibration points plus every verification point, the
   space searched again and the new leaders not yet measured verified: at most
   `max_rounds` rounds, within `--budget-s`.
4. The winner: the measured best of the verified candidates (the predicted best without
   verification), written as a profile that extends the input profile, with its launch
   command; tune.json holds everything (`results.tune`).

Everything measured is journaled as it happens (`tune.journal`), so `--resume` after a
kill measures only what is missing; no engine is left running (`runtime.watchdog`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servekit import __version__, jsontext
from servekit.analyze.slo import Slo
from servekit.bench.run_points import read_runs
from servekit.bench.store import write_atomically
from servekit.errors import ConfigError, Interrupted, ServekitError, Terminated, UsageError
from servekit.profiles.schema import Profile
from servekit.results.tune import LoadBlock, TuneDocument
from servekit.sim.build import profile_acceptance, profile_step_params
from servekit.sim.calibrate import RunPoint, acceptance_params, calibrate
from servekit.tune.document import (
    SearchRound,
    VerifiedCandidate,
    load_block,
    tune_document,
    winner_profile_text,
)
from servekit.tune.evaluate import SimModel, Simulator
from servekit.tune.journal import JOURNAL_FILE, Journal, read_journal
from servekit.tune.measure import EngineOptions, Engines, measure_point, stop_leftovers
from servekit.tune.search import Candidate, SearchResult, candidates, search
from servekit.tune.space import Space
from servekit.tune.workload import TuneWorkload

TUNE_FILE = "tune.json"
OUT_FILES = (TUNE_FILE, JOURNAL_FILE)


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


def inputs_of(spec: TuneSpec) -> dict[str, Any]:
    """What must be the same for `--resume` to continue a run."""
    profile_json = jsontext.dumps(spec.profile.model_dump(mode="json"), sort_keys=True)
    space = {k: [str(v) for v in vs] for k, vs in spec.space.dimensions().items()}
    return {
        "profile": spec.profile.name,
        "profile_sha256": hashlib.sha256(profile_json.encode()).hexdigest(),
        "slo": spec.slo.text(),
        "workload": workload_facts(spec.workload),
        "space": space,
        "calibrate": [str(p) for p in spec.calibrate],
        "seed": spec.seed,
        "verify": {
            "count": spec.verify.count,
            "bound": spec.verify.bound,
            "max_rounds": spec.verify.max_rounds,
            "max_points": spec.verify.max_points,
        },
    }


def workload_facts(w: TuneWorkload) -> dict[str, str | int | float | None]:
    """The workload as tune.json states it."""
    return {
        "kind": w.kind,
        "loop": w.loop,
        "input_len": w.input_len,
        "output_len": w.output_len,
        "temperature": w.temperature,
        "requests": w.requests,
        "arrival": w.arrival if w.loop == "rate" else None,
        "sessions": w.sessions.source if w.sessions is not None else None,
        "trace": w.trace.file if w.trace is not None else None,
    }


def prepare_out(spec: TuneSpec) -> None:
    """Refuse to replace an earlier run without --force, or to resume another run.

    Raises:
        UsageError: `out` holds a run and neither --resume nor --force is given, or
            --resume finds a run of other inputs (or none).
    """
    out = spec.out
    present = [name for name in OUT_FILES if (out / name).exists()]
    if spec.resume:
        previous = read_journal(out).inputs
        if previous is None:
            raise UsageError(
                f"--resume: {out} holds no tune journal to continue", fix="run without --resume"
            )
        now = json.loads(jsontext.dumps(inputs_of(spec)))
        if previous != now:
            changed = sorted(k for k in now if previous.get(k) != now[k])
            raise UsageError(
                f"--resume: {out} was tuned with other {', '.join(changed)}",
                fix="give the same options as the run you resume, or --force to start over",
            )
        return
    if present and not spec.force:
        raise UsageError(
            f"{out} already holds a tune run ({', '.join(present)})",
            fix="--resume to continue it, --force to replace it, or another --out",
        )
    for name in present:
        (out / name).unlink()


def run_tune(
    spec: TuneSpec, events: Events, *, clock: Callable[[], float] = time.monotonic
) -> TuneDocument:
    """Tune; returns tune.json's document (also written, with the winner's profile).

    Raises:
        UsageError: a bad output directory, a budget too small to verify.
        ServekitError: nothing in the space can run, a calibration that fails.
        Interrupted: Ctrl-C or SIGTERM (the journal keeps what was measured; no engine
            is left running).
    """
    started_clock = clock()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    prepare_out(spec)
    earlier = read_journal(spec.out) if spec.resume else None
    journal = Journal(spec.out)
    engines: Engines | None = None
    terminated = False

    def on_sigterm(_signum: int, _frame: object) -> None:  # stop like Ctrl-C
        nonlocal terminated
        if not terminated:
            terminated = True
            raise KeyboardInterrupt

    previous = (
        signal.signal(signal.SIGTERM, on_sigterm)
        if threading.current_thread() is threading.main_thread()
        else None
    )
    try:
        if earlier is None:
            journal.write("inputs", inputs=inputs_of(spec))
        options = spec.verify.engine
        if earlier is not None and earlier.engines and options is not None:
            stop_leftovers(options.state_dir, earlier.engines, events.say)
        tuner = _Tuner(spec, events, journal, earlier, clock, started_clock)
        if options is not None and spec.verify.count:
            engines = Engines(options, journal, events.say)
        doc = tuner.run(engines, started_at)
    except (KeyboardInterrupt, Interrupted) as exc:
        stopped = Terminated if terminated or isinstance(exc, Terminated) else Interrupted
        raise stopped(
            "tune stopped; no engine is left running and the journal keeps every point measured",
            fix=f"continue it with the same options and --resume (--out {spec.out})",
        ) from None
    finally:
        if engines is not None:
            engines.stop()
        journal.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return doc


class _Tuner:
    """The state of one run: calibration points, search rounds, verifications."""

    def __init__(
        self,
        spec: TuneSpec,
        events: Events,
        journal: Journal,
        earlier: Any,
        clock: Callable[[], float],
        started: float,
    ) -> None:
        self.spec = spec
        self.events = events
        self.journal = journal
        self.cache: dict[tuple[str, float], dict[str, Any]] = (
            dict(earlier.measured) if earlier is not None else {}
        )
        self.clock = clock
        self.started = started
        self.variants: dict[str, Profile] = {}
        self.rounds: list[SearchRound] = []
        self.verified: dict[str, VerifiedCandidate] = {}
        self.training: list[RunPoint] = []
        self.pool: list[Candidate] = []

    # -- the simulator's calibration ------------------------------------------------------

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

    def _read_calibration(self) -> None:
        self._run_profiles: dict[str, str | None] = {}
        for run_dir in self.spec.calibrate:
            points, _ = read_runs([run_dir])
            self._note_profiles(run_dir)
            self.training += points

    def _note_profiles(self, run_dir: Path) -> None:
        from servekit.bench.store import read_summary

        self._run_profiles[str(run_dir)] = read_summary(run_dir).target.profile

    def _model(self, round_: int) -> tuple[SimModel, dict[str, Any]]:
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

    # -- the run --------------------------------------------------------------------------

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return self.clock() - self.started

    def run(self, engines: Engines | None, started_at: str) -> TuneDocument:
        spec = self.spec
        self._read_calibration()
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
        model_rounds: list[dict[str, Any]] = []
        round_ = 0
        while True:
            model, facts = self._model(round_)
            model_rounds.append(facts)
            result = self._search(model, round_)
            self._write(model_rounds, started_at)
            if engines is None or not spec.verify.count:
                break
            if round_ == 0:
                self._check_budget(result)
            fresh = self._verify_round(engines, result, round_)
            self._write(model_rounds, started_at)
            missed = [v for v in self.verified.values() if not v.within(spec.verify.bound)]
            if not missed or round_ + 1 >= spec.verify.max_rounds or not fresh:
                break
            if self._over_budget():
                self.events.say("the budget is spent: no refit")
                break
            self.events.say(
                f"{len(missed)} verified prediction(s) off by more than "
                f"{spec.verify.bound:.0%}: refitting on every measured point"
            )
            round_ += 1
        if engines is not None:
            engines.stop()
        if len(self.rounds) > 1 and self.verified:  # the last model's view of each, in full
            last = self.rounds[-1]
            sim = Simulator(spec.workload, spec.slo, last.model, seed=spec.seed)
            by_id = {c.ident: c for c in self.pool}
            for f in last.result.finalists:
                by_id.setdefault(f.candidate.ident, f.candidate)
            for ident, v in self.verified.items():
                if v.round < last.round and ident in by_id:
                    final = sim.search(by_id[ident].replica(), spec.workload.requests)
                    self.verified[ident] = dataclasses.replace(v, final=(final, last.round))
        return self._write(model_rounds, started_at, final=True)

    def _search(self, model: SimModel, round_: int) -> SearchResult:
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
        self.rounds.append(SearchRound(round_, result, wall, model))
        self.events.say(
            f"round {round_}: {result.simulated:,} points simulated, {result.reused:,} reused, "
            f"in {wall:.1f} s"
        )
        return result

    # -- verification ---------------------------------------------------------------------

    def _need_s(self, result: SearchResult, ident: str) -> float:
        """Predicted seconds to verify one candidate: its start and its points."""
        scored = result.scores.get(ident)
        at = scored.evaluation.at if scored is not None else None
        per_point = at.duration_s if at is not None and at.duration_s else 60.0
        options = self.spec.verify
        return options.start_estimate_s + options.max_points * per_point

    def _over_budget(self, need_s: float = 0.0) -> bool:
        budget = self.spec.budget_s
        return budget is not None and self.elapsed() + need_s > budget

    def _check_budget(self, result: SearchResult) -> None:
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

    def _verify_round(self, engines: Engines, result: SearchResult, round_: int) -> int:
        """Verify this round's top candidates not yet verified; returns how many."""
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
            if self._over_budget(need):
                self.events.say(f"skipping {candidate.ident}: the budget is spent")
                continue
            scored = result.scores[candidate.ident]
            self.verified[candidate.ident] = self._verify(engines, candidate, scored, round_)
            done += 1
        return done

    def _verify(
        self, engines: Engines, candidate: Candidate, scored: Any, round_: int
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
            model_source=self.rounds[-1].model.source,
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
        key = (candidate.ident, float(load))
        cached = self.cache.get(key)
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
            self.journal.write(
                "measured",
                candidate=candidate.ident,
                load=float(load),
                round=round_,
                point=block.as_json(),
            )
            self.cache[key] = block.as_json()
        # every measured point trains the next round's refit
        if (run_dir / "records.jsonl").is_file():
            try:
                points, _ = read_runs([run_dir])
            except ServekitError:
                points = []
            self._run_profiles[str(run_dir)] = profile.name
            self.training += [
                p for p in points if p.source not in {t.source for t in self.training}
            ]
        verdict = "meets" if block.met else "misses"
        self.events.say(
            f"{candidate.ident} at {self.spec.workload.label(load)}: {verdict} the "
            f"SLO, {block.request_rps:.3g} req/s"
        )
        return block

    # -- output ---------------------------------------------------------------------------

    def _write(
        self, model_rounds: list[dict[str, Any]], started_at: str, *, final: bool = False
    ) -> TuneDocument:
        spec = self.spec
        doc, winner = tune_document(
            version=__version__,
            started_at=started_at,
            profile=spec.profile,
            slo=spec.slo,
            workload=spec.workload,
            facts=workload_facts(spec.workload),
            space=spec.space,
            pool=self.pool,
            rounds=self.rounds,
            model_rounds=model_rounds,
            verified=list(self.verified.values()),
            bound=spec.verify.bound,
            profile_file=self._winner_file(),
            elapsed_s=self.elapsed(),
        )
        if final and winner is not None:
            text = winner_profile_text(
                spec.profile,
                winner,
                extends=spec.extends,
                name=self._winner_name(),
                slo=spec.slo,
                doc=doc,
            )
            write_atomically(spec.out / self._winner_file(), text)
        write_atomically(spec.out / TUNE_FILE, jsontext.dumps(doc.as_json(), indent=2) + "\n")
        return doc

    def _winner_name(self) -> str:
        return f"{self.spec.profile.name[:90]}-tuned"

    def _winner_file(self) -> str:
        return f"{self._winner_name()}.yaml"
