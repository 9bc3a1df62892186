"""`servekit tune` end to end (shell): calibrate, search, verify on the engine, refit, write.

1. The simulator's calibration (round 0): `--calibrate` run directories fitted by
   `sim.calibrate` (each point under the deployment it measured), or the profile's own
   coefficients (`tune.calibration`).
2. Every candidate of the space planned; the feasible ones searched (`tune.rounds` over
   `tune.search`).
3. With `--verify N`: the top N launched one at a time (`tune.verify` over
   `tune.measure`), each measured at its predicted SLO-meeting load and the loads next to
   it, up to `max_points`; the measured goodput set against the predicted one. When an
   error exceeds the bound, the simulator is refitted on the calibration points plus every
   verification point, the space searched again and the new leaders not yet measured
   verified: at most `max_rounds` rounds, within `--budget-s`. The input profile as it is
   is measured too, after the first round's leaders (when it is not one of them and the
   budget allows).
4. The winner: the measured best of the verified candidates (the predicted best without
   verification), written as a profile that extends the input profile, with its launch
   command, and set against the input profile as it is (predicted by the same model, and
   measured when both were); tune.json holds everything (`results.tune`, written by
   `tune.output`).

Everything measured is journaled as it happens (`tune.journal`), so `--resume` after a
kill measures only what is missing; no engine is left running (`runtime.watchdog`).
"""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from servekit.errors import Interrupted, Terminated
from servekit.results.tune import TuneDocument
from servekit.tune.calibration import Calibration
from servekit.tune.journal import Journal, JournalState, MeasuredPoints, read_journal
from servekit.tune.measure import Engines, stop_leftovers
from servekit.tune.output import inputs_of, prepare_out, write_results
from servekit.tune.rounds import SearchRounds
from servekit.tune.spec import Events, TuneSpec
from servekit.tune.verify import Verifier


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
        earlier: JournalState | None,
        clock: Callable[[], float],
        started: float,
    ) -> None:
        self.spec = spec
        self.events = events
        self.clock = clock
        self.started = started
        self.search = SearchRounds(spec, events)
        self.calibration = Calibration(spec, self.search.variants)
        self.verifier = Verifier(
            spec, events, MeasuredPoints(journal, earlier), self.calibration, self.elapsed
        )

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return self.clock() - self.started

    def run(self, engines: Engines | None, started_at: str) -> TuneDocument:
        spec = self.spec
        self.calibration.read()
        self.search.plan()
        model_rounds: list[dict[str, Any]] = []
        round_ = 0
        while True:
            model, facts = self.calibration.model(round_)
            model_rounds.append(facts)
            result = self.search.search_round(model, round_)
            self._write(model_rounds, started_at)
            if engines is None or not spec.verify.count:
                break
            if round_ == 0:
                self.verifier.check_budget(result)
            fresh = self.verifier.verify_round(engines, result, round_, model.source)
            if round_ == 0 and self.search.as_is is not None:
                as_is = self.search.rounds[-1].as_is
                fresh += self.verifier.verify_as_is(
                    engines, self.search.as_is, as_is, round_, model.source
                )
            self._write(model_rounds, started_at)
            verified = self.verifier.verified
            missed = [v for v in verified.values() if not v.within(spec.verify.bound)]
            if not missed or round_ + 1 >= spec.verify.max_rounds or not fresh:
                break
            if self.verifier.over_budget():
                self.events.say("the budget is spent: no refit")
                break
            self.events.say(
                f"{len(missed)} verified prediction(s) off by more than "
                f"{spec.verify.bound:.0%}: refitting on every measured point"
            )
            round_ += 1
        if engines is not None:
            engines.stop()
        self.search.final_views(self.verifier.verified)
        return self._write(model_rounds, started_at, final=True)

    def _write(
        self, model_rounds: list[dict[str, Any]], started_at: str, *, final: bool = False
    ) -> TuneDocument:
        return write_results(
            self.spec,
            started_at=started_at,
            pool=self.search.pool,
            rounds=self.search.rounds,
            model_rounds=model_rounds,
            verified=list(self.verifier.verified.values()),
            elapsed_s=self.elapsed(),
            final=final,
            as_is=self.search.as_is,
        )
