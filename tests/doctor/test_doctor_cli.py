"""`servekit doctor` end to end: on this machine, and with a fake NVML on PYTHONPATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from model_files import write_model

SHIM = Path(__file__).parent / "nvml_shim"
M3 = "minimax-m3-mxfp8-8xa800"


def _doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "servekit", "doctor", *args, "--json"],
        capture_output=True, text=True, check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def _by_check(document: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for f in document["findings"] if f["check"] == check]


def test_this_machine_has_no_gpu_no_docker_engine_and_the_profiles_known_issues() -> None:
    """The issue's must-show: no GPU found, docker engine absent, the known-issue findings,
    and exit 3 because of the errors."""
    code, document = _doctor(M3)
    if document["machine"]["gpus"]["gpus"]:
        pytest.skip("this machine has GPUs")
    assert code == 3
    assert document["exit_code"] == 3
    gpu = _by_check(document, "gpu")
    assert gpu[0]["severity"] == "error"
    assert "no GPU found" in gpu[0]["title"]
    docker = _by_check(document, "docker")[0]
    if document["machine"]["docker"]["server_version"] is None:  # this machine: no daemon
        assert docker["severity"] == "error"
        assert "docker engine absent" in docker["title"] or "not installed" in docker["title"]
    issues = {f["issue_id"]: f for f in _by_check(document, "known_issue")}
    assert issues["m3-topk-layout-triton"]["severity"] == "warning"
    assert issues["m3-block-size-128"]["severity"] == "info"
    assert issues["cudagraph-memory-estimate"]["severity"] == "info"
    assert document["counts"]["error"] >= 2
    assert document["kb_version"] >= 2
    severities = [f["severity"] for f in document["findings"]]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)


def test_fake_nvml_with_eight_a800s_and_a_complete_model(tmp_path: Path) -> None:
    """With NVML answering 8 A800s and the checkpoint present, only docker and the top-k
    warning remain; the process runtime does not need docker, so the exit code is 0."""
    write_model(tmp_path / "MiniMax-M3-MXFP8")
    write_model(tmp_path / "MiniMax-M3-EAGLE3", shards=1)
    env = {"PYTHONPATH": os.pathsep.join([str(SHIM), os.environ.get("PYTHONPATH", "")])}
    code, document = _doctor(M3, "--runtime", "process", "--set",
                             f"deploy.host_model_dir={tmp_path}", env=env)  # fmt: skip
    gpus = document["machine"]["gpus"]
    assert len(gpus["gpus"]) == 8
    assert gpus["driver_version"] == "535.183.01"
    gpu = _by_check(document, "gpu")
    assert [f["severity"] for f in gpu] == ["info"]
    assert all(f["severity"] == "info" for f in _by_check(document, "model"))
    assert document["compute_capability"] == "8.0"
    assert document["counts"]["error"] == 0, document["findings"]
    assert code == 0
    strict, _ = _doctor(M3, "--runtime", "process", "--strict", "--set",
                        f"deploy.host_model_dir={tmp_path}", env=env)  # fmt: skip
    assert strict == 3  # the top-k and plan warnings


def test_human_output_lists_findings_and_verdict() -> None:
    """Without --json: one line per finding, fixes, and the verdict with the exit code."""
    done = subprocess.run([sys.executable, "-m", "servekit", "doctor", M3],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert "servekit doctor: minimax-m3-mxfp8-8xa800" in done.stdout
    assert "m3-topk-layout-triton" in done.stdout
    assert f"(exit {done.returncode})" in done.stdout


def test_unknown_profile_is_a_clear_error() -> None:
    """A profile that does not exist is named, with no traceback."""
    done = subprocess.run([sys.executable, "-m", "servekit", "doctor", "no-such-profile"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "no-such-profile" in done.stderr
    assert "Traceback" not in done.stderr
