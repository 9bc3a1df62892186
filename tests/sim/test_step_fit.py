"""Tests of `servekit sim fit`: run directories in, per-point errors and a profile out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli
from servekit.profiles import load_profile

PROFILE = "llama-3.1-70b-4xh100"


def sim_run(out: Path, *load: str) -> None:
    """Write a sim run directory (records.jsonl + summary.json) of the profile."""
    made = CliRunner().invoke(cli, [
        "sim", "run", "--profile", PROFILE, *load, "--requests-per-point", "12",
        "--input-len", "256", "--output-len", "24", "--temperature", "0", "--out", str(out),
    ])  # fmt: skip
    assert made.exit_code == 0, made.stderr


def test_sim_fit_cli_writes_a_loadable_profile(tmp_path: Path) -> None:
    """sim fit on the profile's own simulation reproduces every point, fit and held out,
    reports undetermined coefficients with a reason, and -o writes a profile extending P."""
    sim_run(tmp_path / "train", "--concurrency", "1,4")
    sim_run(tmp_path / "held", "--concurrency", "8")
    out = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(cli, [
        "sim", "fit", str(tmp_path / "train"), "--holdout", str(tmp_path / "held"),
        "--profile", PROFILE, "-o", str(out), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [(p["label"], p["held_out"]) for p in doc["points"]] == [
        ("c=1", False), ("c=4", False), ("c=8", True),
    ]  # fmt: skip
    for point in doc["points"]:
        assert point["requests"] == 12
        for error in point["error"].values():
            assert abs(error) < 1e-3  # the runs were made with the profile's own coefficients
    undetermined = {c["name"]: c["note"] for c in doc["coefficients"] if not c["determined"]}
    assert "no speculative decoding" in undetermined["verify_request_ms"]
    assert doc["acceptance"] is None
    fitted = load_profile(str(out))
    assert fitted.simulator is not None
    assert fitted.serve_args == load_profile(PROFILE).serve_args


def test_sim_fit_table_labels_fit_and_held_out(tmp_path: Path) -> None:
    """The text output has one row per point labelled fit or held out, and the coefficients."""
    sim_run(tmp_path / "train", "--concurrency", "1,4")
    sim_run(tmp_path / "held", "--rate", "4")
    result = CliRunner().invoke(cli, [
        "sim", "fit", str(tmp_path / "train"), "--holdout", str(tmp_path / "held"),
        "--profile", PROFILE,
    ], env={"COLUMNS": "120"})  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("held out") == 1
    assert "rate=4" in result.stdout
    assert "undetermined (kept)" in result.stdout


def test_run_dir_without_records_is_one_line(tmp_path: Path) -> None:
    """A directory with no records.jsonl fails with one line naming it."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["sim", "fit", str(empty), "--profile", PROFILE])
    assert result.exit_code == 1
    assert f"{empty} has no records.jsonl" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_runs_of_two_profiles_are_refused(tmp_path: Path) -> None:
    """Runs that name different profiles are not fitted together."""
    sim_run(tmp_path / "a", "--concurrency", "1")
    other = tmp_path / "b"
    made = CliRunner().invoke(cli, [
        "sim", "run", "--profile", "deepseek-v3-8xh200", "--concurrency", "1",
        "--requests-per-point", "2", "--input-len", "64", "--output-len", "4", "--out", str(other),
    ])  # fmt: skip
    assert made.exit_code == 0, made.stderr
    result = CliRunner().invoke(cli, ["sim", "fit", str(tmp_path / "a"), str(other),
                                      "--profile", PROFILE])  # fmt: skip
    assert result.exit_code == 1
    assert "a fit needs one deployment" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("bad", ['{"id": 1}', "not json"])
def test_invalid_records_are_one_line(tmp_path: Path, bad: str) -> None:
    """A records.jsonl line that is not a record fails with one line naming the file."""
    sim_run(tmp_path / "run", "--concurrency", "1")
    (tmp_path / "run" / "records.jsonl").write_text(bad + "\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["sim", "fit", str(tmp_path / "run"), "--profile", PROFILE])
    assert result.exit_code == 1
    assert "records.jsonl:1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_realizations_average_the_open_loop_draws(tmp_path: Path) -> None:
    """--realizations 3 predicts each point as the mean of the single draws with seeds 0, 1
    and 2; the measured figures do not move."""
    sim_run(tmp_path / "train", "--concurrency", "1,4")
    sim_run(tmp_path / "rate", "--rate", "6")

    def held_out(*options: str) -> dict[str, dict[str, float]]:
        result = CliRunner().invoke(cli, [
            "sim", "fit", str(tmp_path / "train"), "--holdout", str(tmp_path / "rate"),
            "--profile", PROFILE, *options, "--json",
        ])  # fmt: skip
        assert result.exit_code == 0, result.stderr
        point: dict[str, dict[str, float]] = json.loads(result.stdout)["points"][-1]
        return point

    singles = [held_out("--seed", str(seed)) for seed in (0, 1, 2)]
    mean = held_out("--realizations", "3")
    assert mean["measured"] == singles[0]["measured"]
    for name, value in mean["predicted"].items():
        draws = [s["predicted"][name] for s in singles]
        assert value == pytest.approx(sum(draws) / 3, rel=1e-4, abs=1e-5)
    assert len({s["predicted"]["ttft_mean_ms"] for s in singles}) == 3  # the draws differ


def test_calibrate_models_the_hardware_it_is_given(tmp_path: Path) -> None:
    """`calibrate(gpu=...)` prices steps on the hardware given, not the catalog entry: runs
    simulated on the catalog GPU, fitted as if measured on one with 0.8x the bandwidth,
    come back with the same predictions and 1.25x the bandwidth efficiency (the product is
    what the steps measured)."""
    from dataclasses import replace

    from servekit.bench.run_points import read_runs
    from servekit.hardware import lookup_gpu
    from servekit.sim.calibrate import calibrate

    sim_run(tmp_path / "train", "--concurrency", "1,4")
    profile = load_profile(PROFILE)
    training, _ = read_runs([tmp_path / "train"])
    catalog = lookup_gpu(profile.hardware.gpu)
    slower = replace(catalog, hbm_gb_s=0.8 * catalog.hbm_gb_s)
    on_catalog = calibrate(profile, training)
    on_slower = calibrate(profile, training, gpu=slower)
    for fit in (on_catalog, on_slower):
        for check in fit.checks:
            assert abs(check.error("latency_mean_s")) < 1e-3
    value = {e.name: e for e in on_catalog.steps.estimates}["hbm_efficiency"]
    scaled = {e.name: e for e in on_slower.steps.estimates}["hbm_efficiency"]
    assert value.determined, value
    assert scaled.value == pytest.approx(value.value / 0.8, rel=1e-3)
