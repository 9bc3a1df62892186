"""The offline engine's results are pinned: summaries of fixed sweeps equal the golden files.

The golden files in tests/sim/data/offline_golden/ were written by the engine before it was
made faster (issue #16 item 6): for each case, `<case>.config.json` holds the engine's inputs
(the simulator's model facts, limits, step coefficients and acceptance, snapshot from the M3
profiles so a later recalibration of the profiles does not move them), the load points and
the seed; `<case>.summary.json` is the summary.json document `servekit sim run` writes for
it (fixed version and start time); `<case>.records.sha256` is the digest of every record's
JSON line in order. Any change to the engine's arithmetic, scheduling or RNG draw order
changes at least one of them. Issue #28 added `token_sources` to each point and
`text_chunks` and `token_source` to each record; the goldens were rewritten then, after
checking that without those keys every summary and record digest equalled the earlier ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import batch_size_schedules  # type: ignore[import-not-found]

from servekit.errors import SimulationError
from servekit.results.summary import Workload
from servekit.sim.dynamic_sd import dynamic_sd_lookup
from servekit.sim.engine import DecodeWindow, Engine, EngineLimits, StepResult
from servekit.sim.model import SimModel
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.sim.step_time import BatchShape, StepPricer, step_time_s
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


class _StepByStep(Engine):
    """The engine without decode windows: every step through `step()` (the reference)."""

    def decode_window(self, stop: Callable[[float], bool] | None = None) -> DecodeWindow | None:
        return None


def _random_model(data: st.DataObject, *, whole: bool) -> SimModel:
    number = st.integers(1, 10**6) if whole else st.floats(0.1, 1e6)
    return SimModel(
        nonexpert_bytes=data.draw(st.floats(1e8, 1e10)),
        expert_bytes=data.draw(st.sampled_from([0.0, 3.3e8])),
        num_experts=data.draw(st.sampled_from([0, 64])),
        top_k=4,
        shared_experts=data.draw(st.integers(0, 1)),
        flops_per_token=float(data.draw(number)) * 1e3,
        attention_flops_per_ctx_token=float(data.draw(number)),
        kv_bytes_per_token=float(data.draw(number)),
        attended_context_cap=data.draw(st.sampled_from([None, 64, 300])),
        indexer_bytes_per_token=float(data.draw(st.sampled_from([0, 1, 7]))) * 1.5,
        hbm_bytes_s=2e12,
        peak_flops=3e14,
        num_gpu_blocks=data.draw(st.integers(12, 400)),
        block_size=data.draw(st.sampled_from([4, 16, 128])),
        max_model_len=8192,
    )


STEP_PARAMS = StepTimeParams(
    base_ms=7.0,
    hbm_efficiency=0.7,
    compute_efficiency=0.5,
    decode_request_ms=0.03,
    verify_request_ms=0.2,
    prefill_request_ms=1.1,
    draft_pass_ms=1.7,
    draft_request_ms=0.09,
)
contexts_st = st.lists(st.integers(0, 3000), max_size=40)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), k=st.integers(0, 4), whole=st.booleans())
def test_pricer_equals_step_time_s(data: st.DataObject, k: int, whole: bool) -> None:
    """StepPricer prices any batch as step_time_s does (each of its paths: one step, window
    steps, decode-only and verify-only steps): to 1e-12 relative, exactly when the model's
    per-token bytes and FLOPs are whole numbers; the paths agree with each other exactly."""
    model = _random_model(data, whole=whole)
    pricer = StepPricer(model, STEP_PARAMS, k)
    decode, verify = data.draw(contexts_st), data.draw(contexts_st) if k else []
    chunks = data.draw(st.lists(st.tuples(st.integers(1, 2048), st.integers(0, 3000)), max_size=5))
    batch = BatchShape(tuple(decode), tuple(verify), tuple(chunks), k)
    expected = step_time_s(batch, model, STEP_PARAMS)
    sums = (
        len(decode),
        len(verify),
        pricer.attended_sum(decode),
        pricer.attended_sum(verify),
        sum(decode) + sum(verify),
    )
    got = [pricer.duration_s(*sums, chunks)]
    if not chunks:
        got += pricer.window_durations_s([sums])
        if decode and not verify:
            got += pricer.decode_durations_s(sums[0], [sums[2]], [sums[4]])
        if verify and not decode and sums[3] == sums[4]:  # no context at the attention cap
            got += pricer.verify_durations_s(sums[1], [sums[4]])
    assert got == [got[0]] * len(got)  # the paths do the same float operations
    for value in got:
        if whole:
            assert value == expected
        else:
            assert value == pytest.approx(expected, rel=1e-12, abs=0.0)


class _Windows(Engine):
    """The engine, counting the decode windows it runs."""

    windows = 0

    def decode_window(self, stop: Callable[[float], bool] | None = None) -> DecodeWindow | None:
        window = super().decode_window(stop)
        self.windows += window is not None
        return window


def _windows_agree_with_steps(
    data: st.DataObject, k: int, seed: int, *, dynamic: bool = False
) -> None:
    """Run one random point with decode windows and one `step()` at a time; assert the
    records, counters and samples are equal."""
    model = _random_model(data, whole=data.draw(st.booleans()))
    seqs = data.draw(st.integers(1, 24))
    budget = data.draw(st.sampled_from([64, 512, 4096]))
    lookup = chunked = None
    if dynamic:
        schedule = data.draw(batch_size_schedules(max_k=4))
        lookup = dynamic_sd_lookup(schedule, max_num_seqs=seqs, num_speculative_tokens=k)
        chunked = data.draw(st.booleans())
        if not chunked:  # vLLM needs the budget to hold the longest request then
            budget = max(budget, 512)
            model = dataclasses.replace(model, max_model_len=budget)
    limits = EngineLimits(seqs, budget, k, lookup, chunked is not False)
    acceptance = AcceptanceParams(((0.0, (0.9, 0.7, 0.5, 0.4)), (1.0, (0.6, 0.4, 0.3, 0.2))))
    requests = data.draw(st.integers(1, 30))
    load = data.draw(st.sampled_from(["closed", "poisson", "gamma:0.5", "inf"]))
    point = LoadPoint(
        "p",
        requests,
        data.draw(st.integers(1, 400)),
        data.draw(st.integers(1, 100)),
        data.draw(st.sampled_from([0.0, 0.4, 1.0])),
        concurrency=data.draw(st.integers(1, 32)) if load == "closed" else None,
        rate_rps=None if load == "closed" else (float("inf") if load == "inf" else 20.0),
        arrival="poisson" if load in ("closed", "inf") else load,
    )
    # a pool from one request's blocks (it must fit alone, or it waits forever) to plenty
    one = -(-(point.input_len + point.output_len + k) // model.block_size)
    model = dataclasses.replace(model, num_gpu_blocks=one * data.draw(st.integers(1, 12)))
    runs = []
    for engine_class in (_Windows, _StepByStep):
        engine = engine_class(
            model, limits, STEP_PARAMS, acceptance if k else None, random.Random(seed)
        )
        try:
            run = run_point(engine, point, random.Random(seed + 1))
        except SimulationError:  # a request over max_model_len: both must refuse it
            runs.append(None)
            continue
        runs.append((run, engine.stats, engine.free_blocks))
    assert runs[0] == runs[1]


@settings(max_examples=80, deadline=None)
@given(
    data=st.data(),
    k=st.sampled_from([0, 0, 2, 3]),
    seed=st.integers(0, 2**32),
)
def test_decode_windows_run_the_steps_step_would_run(
    data: st.DataObject, k: int, seed: int
) -> None:
    """A point run with decode windows gives the same records, counters and samples as the
    same point run one `step()` at a time (closed and open loops, preemption included)."""
    _windows_agree_with_steps(data, k, seed)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), k=st.sampled_from([1, 2, 3, 4]), seed=st.integers(0, 2**32))
def test_decode_windows_run_the_steps_step_would_run_with_a_schedule(
    data: st.DataObject, k: int, seed: int
) -> None:
    """With a random batch-size schedule of dynamic speculative decoding (and chunked
    prefill on or off) windows and `step()` still give the same records and counters."""
    _windows_agree_with_steps(data, k, seed, dynamic=True)


@pytest.mark.parametrize("concurrency", [1, 2, 3, 8])
def test_windows_run_under_a_schedule(concurrency: int) -> None:
    """On the M3 golden inputs with the schedule [[1,2,3],[3,128,0]], decode windows run
    (at k 3 below batch size 3 and k 0 from it) and equal `step()` one at a time."""
    config = load_case("m3-eagle3")
    model = SimModel(**config["model"])
    lookup = dynamic_sd_lookup([(1, 2, 3), (3, 128, 0)], max_num_seqs=128, num_speculative_tokens=3)
    limits = dataclasses.replace(EngineLimits(**config["limits"]), dynamic_sd_lookup=lookup)
    step = StepTimeParams(**config["step"])
    acceptance = AcceptanceParams(tuple((t, tuple(p)) for t, p in config["acceptance"]))
    point = LoadPoint("c", 24, 1024, 128, 0.7, concurrency=concurrency)
    windows = _Windows(model, limits, step, acceptance, random.Random(3))
    steps = _StepByStep(model, limits, step, acceptance, random.Random(3))
    got = run_point(windows, point, random.Random(4))
    assert got == run_point(steps, point, random.Random(4))
    assert windows.stats == steps.stats
    assert windows.windows > 0
    assert (windows.stats.draft_tokens > 0) == (concurrency < 3)


def test_a_replaced_step_sees_every_step() -> None:
    """With `step()` wrapped on the instance, run_point runs no window: the wrapper sees
    every step the engine counts, and the records equal those of a plain engine."""
    config = load_case("m3-eagle3")
    model = SimModel(**config["model"])
    limits = EngineLimits(**config["limits"])
    step = StepTimeParams(**config["step"])
    acceptance = AcceptanceParams(tuple((t, tuple(p)) for t, p in config["acceptance"]))
    point = LoadPoint("c=4", 16, 1024, 64, 0.7, concurrency=4)
    plain = Engine(model, limits, step, acceptance, random.Random(3))
    watched = Engine(model, limits, step, acceptance, random.Random(3))
    seen = []
    inner = watched.step

    def watching() -> StepResult:
        result = inner()
        seen.append(result.batch)
        return result

    watched.step = watching  # type: ignore[method-assign]
    expected = run_point(plain, point, random.Random(4))
    got = run_point(watched, point, random.Random(4))
    assert len(seen) == watched.stats.steps == plain.stats.steps > 0
    assert got == expected
