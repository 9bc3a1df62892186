"""The identifiability test: fit the simulator's own output and recover its coefficients.

Runs are simulated offline with known coefficients (TRUE), at concurrency 1 and 4, with and
without speculative decoding, then calibrated starting from the profile's own coefficients.
Tolerances: noise-free data (times on the nanosecond clock) recover every determined
coefficient to 1e-4 relative; with 200 us of uniform jitter on every chunk arrival, each
determined coefficient lies within 4 of its standard errors of the truth (measured over
seeds 0-4: |z| <= 1.61). A coefficient the data does not exercise, or exercises only in a
fixed combination with another, is reported undetermined with the reason and keeps the
profile's value.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from sim_helpers import jittered

from servekit.cli.main import cli
from servekit.profiles import load_profile
from servekit.profiles.schema import Profile
from servekit.records import RequestRecord
from servekit.results.summary import ServerBlock
from servekit.sim.build import build_engine, profile_acceptance, profile_step_params
from servekit.sim.calibrate import Calibration, RunPoint, calibrate
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import StepTimeParams

DENSE = "llama-3.1-70b-4xh100"
SPECULATIVE = "minimax-m3-mxfp8-8xa800"  # EAGLE3, k = 3
TRUE = StepTimeParams(
    base_ms=9.0,
    hbm_efficiency=0.45,
    compute_efficiency=0.3,
    decode_request_ms=0.2,
    verify_request_ms=0.5,
    prefill_request_ms=1.5,
    draft_pass_ms=1.2,
    draft_request_ms=0.1,
)
NO_SPEC = ("verify_request_ms", "draft_pass_ms", "draft_request_ms")


def simulated(
    profile: Profile,
    loads: list[tuple[int | None, float | None, int]],
    *,
    jitter_ns: int = 0,
    seed: int = 0,
) -> list[RunPoint]:
    """Points simulated with TRUE: (concurrency, rate, input length) each, 24 requests of 64
    output tokens at temperature 0."""
    rng = random.Random(seed)
    points = []
    for concurrency, rate, input_len in loads:
        label = f"c={concurrency}" if concurrency else f"rate={rate:g}"
        load = LoadPoint(label, 24, input_len, 64, 0.0, concurrency=concurrency, rate_rps=rate)
        engine = build_engine(profile, seed=seed, step_params=TRUE)
        records = run_point(engine, load, random.Random(seed)).records
        if jitter_ns:
            records = jittered(records, jitter_ns, rng)
        points.append(
            RunPoint(label, concurrency, rate, "poisson", 0.0, tuple(records), ServerBlock())
        )
    return points


def values(cal: Calibration) -> dict[str, tuple[float, bool, str]]:
    """Each coefficient's (value, determined, note)."""
    return {e.name: (e.value, e.determined, e.note) for e in cal.steps.estimates}


def test_exact_data_recovers_every_exercised_coefficient() -> None:
    """Noise-free runs at concurrency 1 and 4 (two prompt lengths, so that a prefill's
    per-request cost and its FLOPs differ) give back every step coefficient they exercise;
    the speculative ones are undetermined and keep the profile's values."""
    profile = load_profile(DENSE)
    cal = calibrate(profile, simulated(profile, [(1, None, 256), (4, None, 1024)]))
    got = values(cal)
    for name in ("base_ms", "hbm_efficiency", "compute_efficiency", "decode_request_ms",
                 "prefill_request_ms"):  # fmt: skip
        value, determined, _ = got[name]
        assert determined, got[name]
        assert value == pytest.approx(getattr(TRUE, name), rel=1e-4)
    start = profile_step_params(profile)
    for name in NO_SPEC:
        value, determined, note = got[name]
        assert not determined
        assert "no speculative decoding" in note
        assert value == getattr(start, name)
    assert cal.steps.rms_ms < 1e-4
    for check in cal.checks:
        assert abs(check.error("output_tok_s")) < 1e-3
        assert abs(check.error("ttft_mean_ms")) < 1e-3


def test_one_prompt_length_leaves_prefill_cost_and_flops_collinear() -> None:
    """With one prompt length every prefill's per-request cost moves with its FLOPs: one of
    the two is reported undetermined (collinear, kept), the other determined only given it,
    and the pair still reproduces the measured steps."""
    profile = load_profile(DENSE)
    cal = calibrate(profile, simulated(profile, [(1, None, 512), (4, None, 512)]))
    got = values(cal)
    pair = ("prefill_request_ms", "compute_efficiency")
    kept = [n for n in pair if not got[n][1]]
    assert len(kept) == 1
    assert "collinear" in got[kept[0]][2]
    other = next(n for n in pair if n != kept[0])
    assert got[other][2] == f"determined with {kept[0]} kept"
    assert cal.steps.rms_ms < 1e-4


def test_speculative_data_recovers_draft_costs_and_acceptance() -> None:
    """Noise-free speculative runs at concurrency 1 and 4 give back the draft-pass cost; the
    verify and per-request draft costs enter only as verify + k x draft_request (k fixed), so
    one is kept and their sum is recovered; the acceptance read from the verify chunks is
    within 4 standard errors of the engine's."""
    profile = load_profile(SPECULATIVE)
    cal = calibrate(profile, simulated(profile, [(1, None, 512), (4, None, 512)]))
    got = values(cal)
    for name in ("base_ms", "hbm_efficiency", "decode_request_ms", "draft_pass_ms"):
        assert got[name][1], got[name]
        assert got[name][0] == pytest.approx(getattr(TRUE, name), rel=1e-4)
    pair = ("verify_request_ms", "draft_request_ms")
    assert sum(1 for n in pair if not got[n][1]) == 1
    k = 3
    combined = got["verify_request_ms"][0] + k * got["draft_request_ms"][0]
    assert combined == pytest.approx(TRUE.verify_request_ms + k * TRUE.draft_request_ms, rel=1e-4)
    accept = cal.acceptance
    assert accept is not None
    assert accept.source == "chunks"
    truth = profile_acceptance(profile).probabilities(0.0)
    for p, stderr, expected in zip(accept.probabilities, accept.stderr, truth, strict=True):
        assert stderr is not None
        assert abs(p - expected) < 4 * stderr


@pytest.mark.parametrize("seed", [0, 1])
def test_jittered_chunks_recover_within_their_standard_errors(seed: int) -> None:
    """With 200 us of jitter on every chunk arrival (steps last ~25 ms), each coefficient
    determined on its own lies within 4 standard errors of the truth."""
    profile = load_profile(DENSE)
    loads: list[tuple[int | None, float | None, int]] = [
        (1, None, 256), (4, None, 1024), (None, 3.0, 512),
    ]  # fmt: skip
    cal = calibrate(profile, simulated(profile, loads, jitter_ns=200_000, seed=seed))
    checked = 0
    for e in cal.steps.estimates:
        if e.determined and not e.note.startswith("determined with"):
            assert e.stderr is not None
            assert abs(e.value - getattr(TRUE, e.name)) < 4 * e.stderr, e
            checked += 1
    assert checked >= 4  # base, hbm and decode at least, whatever the noise hides
    assert cal.steps.estimate("decode_request_ms").determined


def mangled(records: Sequence[RequestRecord], rng: random.Random) -> list[RequestRecord]:
    """Chunks as a busy API server and client deliver them: 10% of a request's chunks merged
    with the next one (two steps' tokens in one chunk), 5% followed at the same instant by a
    usage-only chunk (no token)."""
    out = []
    for r in records:
        times, tokens = [r.chunk_ns[0]], [r.chunk_tokens[0]]
        i = 1
        while i < len(r.chunk_ns):
            u = rng.random()
            if u < 0.1 and i + 1 < len(r.chunk_ns):
                times.append(r.chunk_ns[i + 1])
                tokens.append(r.chunk_tokens[i] + r.chunk_tokens[i + 1])
                i += 2
                continue
            times.append(r.chunk_ns[i])
            tokens.append(r.chunk_tokens[i])
            if u < 0.15:
                times.append(r.chunk_ns[i])
                tokens.append(0)
            i += 1
        out.append(dataclasses.replace(r, chunk_ns=tuple(times), chunk_tokens=tuple(tokens)))
    return out


def test_coalesced_and_jittered_chunks_recover_within_their_standard_errors() -> None:
    """Jitter, coalesced chunks and usage-only chunks together: still every coefficient
    determined on its own within 4 standard errors (measured over seeds 0-3: |z| <= 1.51),
    and the coalesced chunks are counted."""
    profile = load_profile(DENSE)
    loads: list[tuple[int | None, float | None, int]] = [
        (1, None, 256), (4, None, 1024), (None, 3.0, 512),
    ]  # fmt: skip
    rng = random.Random(0)
    points = [
        dataclasses.replace(p, records=tuple(mangled(p.records, rng)))
        for p in simulated(profile, loads, jitter_ns=200_000, seed=0)
    ]
    cal = calibrate(profile, points)
    checked = [
        e for e in cal.steps.estimates if e.determined and not e.note.startswith("determined with")
    ]
    assert {e.name for e in checked} >= {"base_ms", "hbm_efficiency", "decode_request_ms"}
    for e in checked:
        assert e.stderr is not None
        assert abs(e.value - getattr(TRUE, e.name)) < 4 * e.stderr, e
    assert all(rec.coalesced_chunks > 50 for _, rec in cal.reconstructions)


def test_memory_bound_runs_leave_compute_efficiency_undetermined() -> None:
    """Short prompts keep every step memory-bound: compute efficiency is undetermined and
    kept, not set to whatever the optimizer stopped at."""
    profile = load_profile(DENSE)
    cal = calibrate(profile, simulated(profile, [(1, None, 8), (4, None, 8)]))
    value, determined, note = values(cal)["compute_efficiency"]
    assert not determined
    assert note
    assert value == profile_step_params(profile).compute_efficiency


def test_cli_recovers_the_coefficients_of_sim_run_directories(tmp_path: Path) -> None:
    """sim run with a profile carrying TRUE, then sim fit --profile of the original: the
    JSON gives TRUE's exercised coefficients back, and the speculative acceptance comes from
    the run's spec-decode counters."""
    base = load_profile(SPECULATIVE)
    assert base.simulator is not None
    simulator = base.simulator.model_dump(mode="json")
    simulator["step"] = dataclasses.asdict(TRUE)
    (tmp_path / "true.yaml").write_text(
        yaml.safe_dump({"extends": SPECULATIVE, "name": "true", "simulator": simulator}),
        encoding="utf-8",
    )
    runner = CliRunner()
    for name, lengths in (("a", "256"), ("b", "1024")):
        made = runner.invoke(cli, [
            "sim", "run", "--profile", "true", "--profiles-dir", str(tmp_path),
            "--concurrency", "1,4", "--requests-per-point", "16", "--input-len", lengths,
            "--output-len", "48", "--temperature", "0", "--out", str(tmp_path / name),
        ])  # fmt: skip
        assert made.exit_code == 0, made.stderr
    out = tmp_path / "fitted.yaml"
    result = runner.invoke(cli, [
        "sim", "fit", str(tmp_path / "a"), str(tmp_path / "b"), "--profile", SPECULATIVE,
        "-o", str(out), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    got = {c["name"]: c for c in doc["coefficients"]}
    for name in ("base_ms", "hbm_efficiency", "compute_efficiency", "decode_request_ms",
                 "prefill_request_ms", "draft_pass_ms"):  # fmt: skip
        assert got[name]["determined"], got[name]
        assert got[name]["value"] == pytest.approx(getattr(TRUE, name), rel=1e-3)
    accept = doc["acceptance"]
    assert accept["source"] == "counters"
    truth = profile_acceptance(base).probabilities(0.0)
    for p, stderr, expected in zip(accept["probabilities"], accept["stderr"], truth, strict=True):
        assert abs(p - expected) < 4 * stderr
    fitted = load_profile(str(out))
    assert fitted.simulator is not None
    assert fitted.simulator.acceptance[0.0] == accept["probabilities"]  # 0.7 stays P's
    assert fitted.simulator.step.draft_pass_ms == pytest.approx(got["draft_pass_ms"]["value"])
    assert fitted.simulator.input_len in (256, 1024)
