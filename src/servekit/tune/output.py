"""A tune run's output directory (shell): refused or resumed as the run starts, and its
results written as it goes.

`prepare_out` refuses to replace an earlier run without `--force`, and to `--resume` a run
journaled with other inputs (`inputs_of`, the journal's first line); `write_results`
writes tune.json (`results.tune`) and, at the end, the winner's profile.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from servekit import __version__, jsontext
from servekit.bench.store import write_atomically
from servekit.errors import UsageError
from servekit.results.tune import TuneDocument
from servekit.tune.baseline import Baseline
from servekit.tune.document import (
    SearchRound,
    VerifiedCandidate,
    tune_document,
    winner_profile_text,
)
from servekit.tune.journal import JOURNAL_FILE, read_journal
from servekit.tune.search import Candidate
from servekit.tune.spec import TuneSpec
from servekit.tune.workload import TuneWorkload

TUNE_FILE = "tune.json"
OUT_FILES = (TUNE_FILE, JOURNAL_FILE)


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


def write_results(
    spec: TuneSpec,
    *,
    started_at: str,
    pool: list[Candidate],
    rounds: list[SearchRound],
    model_rounds: list[dict[str, Any]],
    verified: list[VerifiedCandidate],
    elapsed_s: float,
    final: bool = False,
    as_is: Baseline | None = None,
) -> TuneDocument:
    """Write tune.json (and, when `final`, the winner's profile); returns the document. The
    winner is set against `as_is`, the input profile as it is, when given."""
    doc, winner = tune_document(
        version=__version__,
        started_at=started_at,
        profile=spec.profile,
        slo=spec.slo,
        workload=spec.workload,
        facts=workload_facts(spec.workload),
        space=spec.space,
        pool=pool,
        rounds=rounds,
        model_rounds=model_rounds,
        verified=verified,
        bound=spec.verify.bound,
        profile_file=winner_file(spec),
        elapsed_s=elapsed_s,
        as_is=as_is,
    )
    if final and winner is not None:
        text = winner_profile_text(
            spec.profile,
            winner,
            extends=spec.extends,
            name=winner_name(spec),
            slo=spec.slo,
            doc=doc,
        )
        write_atomically(spec.out / winner_file(spec), text)
    write_atomically(spec.out / TUNE_FILE, jsontext.dumps(doc.as_json(), indent=2) + "\n")
    return doc


def winner_name(spec: TuneSpec) -> str:
    """The winner's profile name: the input profile's, tuned."""
    return f"{spec.profile.name[:90]}-tuned"


def winner_file(spec: TuneSpec) -> str:
    """The file the winner's profile is written to, in the output directory."""
    return f"{winner_name(spec)}.yaml"
