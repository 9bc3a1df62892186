"""Reconcile with a real log: which term explains the KV difference, and
`--calibrate-from-log`'s measured overheads written into the profile and used by the plan."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from known_models import corpus_entry

from servekit.cli.main import cli
from servekit.hardware import lookup_gpu
from servekit.plan import calibrate, make_plan, plan_inputs
from servekit.plan.calibrate import calibrated_non_torch, measured_calibration
from servekit.plan.reconcile import OVERHEAD_TERM, attribute_kv, attribution_lines
from servekit.plan.startup_log import parse_startup_log
from servekit.profiles import load_profile
from servekit.units import to_gib

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "benchmarks/corpus/real-startups"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def deployment(tmp_path: Path) -> tuple[Path, Path]:
    """A user profile for Llama-3.1-8B on one H100 at vLLM 0.19.0, and that startup's log
    (the corpus entry llmd-llama31-8b-h100-tp1, its lines as logged)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(
        corpus_entry("configs.jsonl", "model", "meta-llama/Llama-3.1-8B-Instruct")["config"]
    ), encoding="utf-8")  # fmt: skip
    code, _, err = run(
        "profiles", "new", "llama8b", "--model-config", str(config), "--gpu", "h100",
        "--gpus", "1", "--engine-version", "0.19.0", "--set", "max_model_len=8192",
        "--set", "gpu_memory_utilization=0.95", "-o", str(tmp_path / "llama8b.yaml"),
    )  # fmt: skip
    assert code == 0, err
    entry = corpus_entry("startups.jsonl", "id", "llmd-llama31-8b-h100-tp1")
    log = tmp_path / "startup.log"
    log.write_text("\n".join(map(str, entry["log_lines"])) + "\n", encoding="utf-8")
    return tmp_path / "llama8b.yaml", log


def _plan_and_figures(profile_file: Path, log: Path):  # type: ignore[no-untyped-def]
    profile = load_profile(str(profile_file))
    plan = make_plan(plan_inputs(profile, lookup_gpu(profile.hardware.gpu)))
    return profile, plan, parse_startup_log(log.read_text(encoding="utf-8"))


def test_attribution_sums_to_the_kv_gap_and_names_the_biggest(
    deployment: tuple[Path, Path],
) -> None:
    """The terms' shares add up to planned - logged KV; the largest is named first."""
    _, plan, figures = _plan_and_figures(*deployment)
    found = attribute_kv(plan, figures)
    assert found is not None
    assert figures.available_kv_gib is not None
    gap = to_gib(plan.kv_cache_bytes) - figures.available_kv_gib
    assert sum(share for _, share in found.terms) == pytest.approx(gap, abs=1e-9)
    assert found.terms[0][0] == found.biggest
    assert abs(found.terms[0][1]) == max(abs(share) for _, share in found.terms)
    names = {name for name, _ in found.terms}
    assert {"weights", OVERHEAD_TERM} <= names
    weights = dict(found.terms)["weights"]
    assert figures.weights_gib is not None
    assert weights == pytest.approx(figures.weights_gib - to_gib(plan.weights.total_bytes))
    lines = attribution_lines(found)
    assert f"the biggest: {found.biggest}" in lines[0]
    assert "bytes per token 131,072 planned" in lines[1]


def test_plan_from_log_prints_the_explaining_term(deployment: tuple[Path, Path]) -> None:
    """plan --from-log says which term explains the KV difference (and --json's
    from_log.explained holds the shares)."""
    profile, log = deployment
    code, out, err = run("plan", str(profile), "--from-log", str(log))
    assert code == 0, err
    assert "planned vs logged = " in out
    assert "the biggest: " in out
    code, out, err = run("plan", str(profile), "--from-log", str(log), "--json")
    assert code == 0, err
    explained = json.loads(out)["from_log"]["explained"]
    assert explained["biggest"] == explained["terms"][0]["term"]
    shares = sum(t["gib"] for t in explained["terms"])
    assert shares == pytest.approx(explained["kv_gap_gib"], abs=0.005)


def test_measured_overhead_is_requested_minus_weights_minus_kv(
    deployment: tuple[Path, Path],
) -> None:
    """activation + non-torch = capacity x utilization - logged weights - logged KV (the
    graph estimate is outside the budget at 0.19.0)."""
    _, plan, figures = _plan_and_figures(*deployment)
    entry = measured_calibration(plan, figures, engine_version="0.19.0", source="measured")
    assert not plan.inputs.estimate_cudagraphs
    expected = 79.19 * 0.95 - 14.99 - 58.11  # the log's figures; H100's 79.19 GiB total
    assert entry.non_kv_overhead_gib == pytest.approx(expected, abs=0.01)
    assert entry.cuda_graph_gib == 0.91  # "Graph capturing finished ... took 0.91 GiB"
    non_torch = calibrated_non_torch(entry, plan.inputs)
    assert to_gib(plan.activations.peak_bytes + non_torch) == pytest.approx(
        entry.non_kv_overhead_gib
    )


def test_calibrate_writes_the_profile_and_plan_uses_it(deployment: tuple[Path, Path]) -> None:
    """--calibrate-from-log writes a measured entry for the GPU and version (log file name,
    no directory), the file stays a loadable profile, and plan then says "measured" and
    lands on the logged KV memory up to the weights' own gap."""
    profile, log = deployment
    before = run("plan", str(profile), "--json")[1]
    code, _, err = run("plan", str(profile), "--calibrate-from-log", str(log))
    assert code == 0, err
    entries = yaml.safe_load(profile.read_text(encoding="utf-8"))["calibration"]
    assert len(entries) == 1
    assert entries[0]["gpu"] == "H100-80GB-SXM"
    assert entries[0]["engine_version"] == "0.19.0"
    assert entries[0]["source"].startswith("measured from startup.log on ")
    assert str(log.parent) not in profile.read_text(encoding="utf-8").split("calibration:")[1]
    code, out, err = run("plan", str(profile))
    assert code == 0, err
    assert "activation + non-torch" in out
    assert "measured from startup.log" in out
    after = json.loads(run("plan", str(profile), "--json")[1])
    assert after != json.loads(before)
    # planned KV = logged KV + (logged weights - planned weights) once the overhead is measured
    weights_gap = 14.99 - after["per_gpu"]["weights_gib"]
    assert after["per_gpu"]["kv_cache_gib"] == pytest.approx(58.11 + weights_gap, abs=0.01)
    code, _, err = run("plan", str(profile), "--calibrate-from-log", str(log))
    assert code == 0, err
    again = yaml.safe_load(profile.read_text(encoding="utf-8"))["calibration"]
    assert len(again) == 1  # the entry for this GPU and version is replaced, not repeated


def test_calibrate_refuses_what_it_must_not_write(
    deployment: tuple[Path, Path], tmp_path: Path
) -> None:
    """A built-in profile or a --model-config plan is never written; one line, exit 2."""
    _, log = deployment
    code, _, err = run("plan", "llama-3.1-70b-4xh100", "--calibrate-from-log", str(log))
    assert code == 2
    assert "built-in profile" in err
    assert len(err.strip().splitlines()) == 1
    config = tmp_path / "config.json"
    code, _, err = run("plan", "--model-config", str(config), "--gpu", "h100", "--gpus", "1",
                       "--calibrate-from-log", str(log))  # fmt: skip
    assert code == 2
    assert "writes into a profile file" in err


def test_calibrate_leaves_a_file_that_is_not_a_profile_alone(
    deployment: tuple[Path, Path], tmp_path: Path
) -> None:
    """A YAML file that is not a valid profile is refused before anything is written."""
    _, log = deployment
    other = tmp_path / "notes.yaml"
    other.write_text("shopping: [milk, eggs]\n", encoding="utf-8")
    code, _, err = run("plan", str(other), "--calibrate-from-log", str(log))
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert other.read_text(encoding="utf-8") == "shopping: [milk, eggs]\n"


def test_calibrated_plan_uses_the_measured_cuda_graphs(deployment: tuple[Path, Path]) -> None:
    """After calibrating, the plan's CUDA-graph term for that GPU and version is the
    measured 0.91 GiB ("Graph capturing finished ... took 0.91 GiB"), shown as measured;
    outside the budget at 0.19.0, so the KV cache is what it was with the overhead alone."""
    profile, log = deployment
    code, _, err = run("plan", str(profile), "--calibrate-from-log", str(log))
    assert code == 0, err
    after = json.loads(run("plan", str(profile), "--json")[1])
    assert after["per_gpu"]["cuda_graphs_gib"] == pytest.approx(0.91)
    assert after["per_gpu"]["kv_cache_gib"] == pytest.approx(
        58.11 + 14.99 - after["per_gpu"]["weights_gib"], abs=0.01
    )
    out = run("plan", str(profile))[1]
    graphs_row = next(line for line in out.splitlines() if "CUDA graphs" in line)
    assert "measured from startup.log" in graphs_row
    assert "outside the budget" in out.split("CUDA graphs", 1)[1].split("KV cache", 1)[0]


def test_measured_graphs_in_the_budget_reproduce_the_logged_kv(
    deployment: tuple[Path, Path],
) -> None:
    """With the graph estimate in the budget, the entry's CUDA-graph figure is the estimate
    vLLM subtracted (0.84 GiB), and the calibrated plan subtracts exactly it: planned KV =
    logged KV + the weights' own gap."""
    profile_file, log = deployment
    _, plan, figures = _plan_and_figures(profile_file, log)
    inputs = dataclasses.replace(plan.inputs, estimate_cudagraphs=True)
    entry = measured_calibration(
        make_plan(inputs), figures, engine_version="0.19.0", source="measured"
    )
    assert entry.cuda_graph_gib == pytest.approx(0.84)
    graphs = calibrate.calibrated_graphs(entry, inputs)
    calibrated = make_plan(
        inputs, non_torch_bytes=calibrated_non_torch(entry, inputs), graph_bytes=graphs
    )
    assert to_gib(calibrated.graphs.total_bytes) == pytest.approx(0.84)
    weights_gap = 14.99 - to_gib(calibrated.weights.total_bytes)
    assert to_gib(calibrated.kv_cache_bytes) == pytest.approx(58.11 + weights_gap, abs=0.005)
    eager = dataclasses.replace(inputs, enforce_eager=True)
    assert calibrate.calibrated_graphs(entry, eager) is None


def test_calibrate_writes_only_the_files_own_entries(
    deployment: tuple[Path, Path], tmp_path: Path
) -> None:
    """A profile that `extends:` one with a calibration entry gets only its own entries plus
    the new one; the parent's entry stays in the parent."""
    parent, log = deployment
    data = yaml.safe_load(parent.read_text(encoding="utf-8"))
    data["calibration"] = [{
        "gpu": "A100-80GB-SXM", "engine_version": "0.19.0", "non_kv_overhead_gib": 2.0,
        "source": "measured from a100.log on 2026-01-01",
    }]  # fmt: skip
    parent.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    child = tmp_path / "child.yaml"
    child.write_text("name: child\nextends: llama8b.yaml\n", encoding="utf-8")
    code, _, err = run("plan", str(child), "--calibrate-from-log", str(log))
    assert code == 0, err
    entries = yaml.safe_load(child.read_text(encoding="utf-8"))["calibration"]
    assert [e["gpu"] for e in entries] == ["H100-80GB-SXM"]
    assert len(yaml.safe_load(parent.read_text(encoding="utf-8"))["calibration"]) == 1
    assert load_profile(str(child)).calibration[0].gpu == "H100-80GB-SXM"


def test_calibrate_validates_before_writing(
    deployment: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A calibrated document that would not validate is refused in one line, and the file
    is never written."""
    profile, log = deployment
    before = profile.read_text(encoding="utf-8")
    bad = [{"gpu": "H100-80GB-SXM", "engine_version": "0.19.0", "non_kv_overhead_gib": -1.0,
            "source": "measured"}]  # fmt: skip
    monkeypatch.setattr("servekit.plan.calibrate.replace_calibration", lambda *_: bad)
    code, _, err = run("plan", str(profile), "--calibrate-from-log", str(log))
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert profile.read_text(encoding="utf-8") == before
