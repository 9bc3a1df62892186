"""`plan --from-log` and `--calibrate-from-log` against a log of another configuration: the
log's gpu_memory_utilization, device total and vLLM version (corpus entry
llmd-llama31-8b-h100-tp1, vLLM 0.19.0 at 0.95 on an H100)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from known_models import corpus_entry

from servekit.cli.main import cli
from servekit.hardware import lookup_gpu
from servekit.plan import make_plan, plan_inputs, reconcile
from servekit.plan.reconcile import OVERHEAD_TERM, attribute_kv, attribution_lines
from servekit.plan.startup_log import parse_startup_log
from servekit.profiles import load_profile

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "benchmarks/corpus/real-startups"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def deployment(tmp_path: Path) -> tuple[Path, Path]:
    """A Llama-3.1-8B profile on one H100 at vLLM 0.19.0 and 0.95, and the real log."""
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
    log = tmp_path / "startup.log"
    entry = corpus_entry("startups.jsonl", "id", "llmd-llama31-8b-h100-tp1")
    log.write_text("\n".join(map(str, entry["log_lines"])) + "\n", encoding="utf-8")
    return tmp_path / "llama8b.yaml", log


def test_another_utilization_is_named_first_and_explains_its_part(
    deployment: tuple[Path, Path],
) -> None:
    """Planned at 0.90 against the 0.95 log: the first sentence says the log requested other
    memory, the request term is capacity x (0.90 - 0.95), and activation + non-torch is
    what it is at the log's own utilization (not blamed for the request)."""
    profile_file, log = deployment
    figures = parse_startup_log(log.read_text(encoding="utf-8"))
    profile = load_profile(str(profile_file))
    inputs = plan_inputs(profile, lookup_gpu(profile.hardware.gpu))
    same = attribute_kv(make_plan(inputs), figures)
    lower = make_plan(dataclasses.replace(inputs, gpu_memory_utilization=0.9))
    other = attribute_kv(lower, figures)
    assert same is not None
    assert other is not None
    shares = dict(other.terms)
    requested = reconcile.REQUESTED_TERM
    assert shares[requested] == pytest.approx(79.19 * (0.9 - 0.95), abs=0.02)
    assert shares[OVERHEAD_TERM] == pytest.approx(dict(same.terms)[OVERHEAD_TERM], abs=0.01)
    assert requested not in dict(same.terms)
    first = attribution_lines(other)[0]
    assert first.startswith("the log requested 0.95 x 79.19 GiB = 75.23 GiB, the plan 0.9")


def test_from_log_warns_of_another_version_and_utilization(
    deployment: tuple[Path, Path],
) -> None:
    """plan --from-log with a 0.32 / 0.90 plan of the 0.19 / 0.95 log: a warning line each
    in the view and in from_log.mismatches."""
    profile, log = deployment
    other = ("--set", "engine.version=0.32.0", "--set", "gpu_memory_utilization=0.9")
    code, out, err = run("plan", str(profile), *other, "--from-log", str(log))
    assert code == 0, err
    assert "warning: the log ran vLLM 0.19.0, the plan follows 0.32.0's accounting" in out
    assert "warning: the log ran at gpu_memory_utilization 0.95, the plan at 0.9" in out
    code, out, err = run("plan", str(profile), *other, "--from-log", str(log), "--json")
    assert code == 0, err
    assert len(json.loads(out)["from_log"]["mismatches"]) == 2
    code, out, err = run("plan", str(profile), "--from-log", str(log), "--json")
    assert json.loads(out)["from_log"]["mismatches"] == []


@pytest.mark.parametrize(
    "override", ["engine.version=0.32.0", "gpu_memory_utilization=0.9"], ids=["version", "gmu"]
)
def test_calibrate_refuses_a_log_of_another_version_or_utilization(
    deployment: tuple[Path, Path], override: str
) -> None:
    """--calibrate-from-log measures with the plan's accounting, so a log of another vLLM
    version or utilization is refused in one line that says how to match it; the file is
    left as it was."""
    profile, log = deployment
    before = profile.read_text(encoding="utf-8")
    code, _, err = run("plan", str(profile), "--set", override, "--calibrate-from-log", str(log))
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert "cannot calibrate: the log ran" in err
    assert "--set engine.version=0.19.0 --set gpu_memory_utilization=0.95" in err
    assert profile.read_text(encoding="utf-8") == before
