"""The offline engine's results are pinned: summaries of fixed sweeps equal the golden files.

The golden files in tests/sim/data/offline_golden/ were written by the engine before it was
made faster (issue #16 item 6): for each case, `<case>.config.json` holds the engine's inputs
(the simulator's model facts, limits, step coefficients and acceptance, snapshot from the M3
profiles so a later recalibration of the profiles does not move them), the load points and
the seed; `<case>.summary.json` is the summary.json document `servekit sim run` writes for
it (fixed version and start time); `<case>.records.sha256` is the digest of every record's
JSON line in order. Any change to the engine's arithmetic, scheduling or RNG draw order
changes at least one of them.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from servekit.results.summary import Workload
from servekit.sim.engine import Engine, EngineLimits
from servekit.sim.model import SimModel
from servekit.sim.offline import LoadPoint
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.sim.sweep import SimPointResult, simulate_sweep, sweep_summary

DATA = Path(__file__).parent / "data" / "offline_golden"
CASES = ("m3-eagle3", "m3-no-eagle3", "m3-eagle3-pressure")
VERSION = "golden"
STARTED_AT = "2026-12-01T00:00:00+00:00"


def load_case(case: str) -> dict[str, Any]:
    """The engine inputs, points and seed of one golden case."""
    config: dict[str, Any] = json.loads((DATA / f"{case}.config.json").read_text("utf-8"))
    return config


def run_case(config: dict[str, Any]) -> list[SimPointResult]:
    """Simulate a case's sweep on fresh engines built from its inputs."""
    model = SimModel(**config["model"])
    limits = EngineLimits(**config["limits"])
    step = StepTimeParams(**config["step"])
    acceptance = (
        None
        if config["acceptance"] is None
        else AcceptanceParams(tuple((t, tuple(p)) for t, p in config["acceptance"]))
    )
    points = [LoadPoint(**p) for p in config["points"]]

    def new_engine(seed: int) -> Engine:
        return Engine(model, limits, step, acceptance, random.Random(seed))

    return simulate_sweep(new_engine, points, seed=config["seed"])


def case_summary(config: dict[str, Any], results: list[SimPointResult]) -> dict[str, Any]:
    """The summary.json document of a case's results, parsed."""
    summary = sweep_summary(
        results,
        profile_name=config["profile"],
        model=None,
        version=VERSION,
        started_at=STARTED_AT,
        workload=Workload(**config["workload"]),
    )
    document: dict[str, Any] = json.loads(json.dumps(summary.as_json()))
    return document


def records_digest(results: list[SimPointResult]) -> str:
    """SHA-256 of every record's JSON line, point by point, in completion order."""
    digest = hashlib.sha256()
    for result in results:
        for record in result.run.records:
            digest.update(record.to_json_line().encode("utf-8") + b"\n")
    return digest.hexdigest()


@pytest.mark.parametrize("case", CASES)
def test_offline_sweep_reproduces_the_golden_summary(case: str) -> None:
    """The sweep's summary equals the golden one exactly (floats too) and so do its records."""
    config = load_case(case)
    results = run_case(config)
    golden = json.loads((DATA / f"{case}.summary.json").read_text("utf-8"))
    assert case_summary(config, results) == golden
    assert records_digest(results) == (DATA / f"{case}.records.sha256").read_text("utf-8").strip()


def test_pressure_case_preempts_and_runs_open_loop_points() -> None:
    """The pressure case exercises preemption and open-loop arrivals, so the goldens pin them."""
    config = load_case("m3-eagle3-pressure")
    points = json.loads((DATA / "m3-eagle3-pressure.summary.json").read_text("utf-8"))["points"]
    assert any(p["server"]["preemptions"] > 0 for p in points)
    assert any(p["rate_rps"] is not None for p in points)
    assert {p["temperature"] for p in config["points"]} == {0.0, 0.7, 1.0}
