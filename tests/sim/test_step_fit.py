"""Tests of fitting the step-time model to measured runs (`servekit sim fit`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.analyze.summarize import point_metrics
from servekit.cli.main import cli
from servekit.errors import ConfigError
from servekit.profiles import load_profile
from servekit.sim.build import DEFAULT_STEP, build_engine
from servekit.sim.fit import MeasuredPoint, fit_step_params, measured_points
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import StepTimeParams

PROFILE = "llama-3.1-70b-4xh100"
TRUE = StepTimeParams(
    base_ms=9.0, hbm_efficiency=0.45, compute_efficiency=0.3, decode_request_ms=0.2
)


def measured(concurrency: int) -> MeasuredPoint:
    """A point 'measured' on an engine with the TRUE coefficients."""
    profile = load_profile(PROFILE)
    load = LoadPoint("x", 32, 512, 64, 0.0, concurrency=concurrency)
    m = point_metrics(
        run_point(build_engine(profile, step_params=TRUE), load, random.Random(0)).records
    )
    assert m.latency_s.mean is not None
    return MeasuredPoint(concurrency, 512, 64, 0.0, m.output_throughput_tok_s, m.latency_s.mean, 32)


def test_fit_recovers_measured_behaviour() -> None:
    """Starting from the defaults, the fit reproduces points measured with other coefficients."""
    profile = load_profile(PROFILE)
    points = [measured(c) for c in (1, 8, 32)]
    result = fit_step_params(
        lambda p: build_engine(profile, step_params=p), points, start=DEFAULT_STEP,
        iterations=120, seed=1,
    )  # fmt: skip
    for fit in result.points:
        assert abs(fit.throughput_error) < 0.05
        assert abs(fit.latency_error) < 0.05


def test_summary_without_fixed_lengths_is_rejected() -> None:
    """A document that is not a servekit summary names what is missing."""
    with pytest.raises(ConfigError, match=r"not a servekit summary\.json"):
        measured_points({"points": []}, where="x/summary.json")


def test_sim_fit_cli_writes_a_loadable_profile(tmp_path: Path) -> None:
    """sim fit reports per-point errors and -o writes a profile that extends the original."""
    run_dir = tmp_path / "run"
    runner = CliRunner()
    made = runner.invoke(cli, [
        "sim", "run", "--profile", PROFILE, "--concurrency", "1,8", "--requests-per-point", "16",
        "--input-len", "256", "--output-len", "32", "--out", str(run_dir),
    ])  # fmt: skip
    assert made.exit_code == 0, made.stderr
    out = tmp_path / "fitted.yaml"
    result = runner.invoke(cli, [
        "sim", "fit", str(run_dir), "--profile", PROFILE, "--iterations", "5",
        "-o", str(out), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [p["concurrency"] for p in doc["points"]] == [1, 8]
    assert doc["loss"] < 1e-3  # the run was made with the profile's own coefficients
    fitted = load_profile(str(out))
    assert fitted.simulator is not None
    assert fitted.serve_args == load_profile(PROFILE).serve_args
