"""tune's verification on a live engine: launched with the launcher, measured with bench,
predicted against measured, stopped exactly; killed with SIGKILL, it leaves no engine and
`--resume` continues.

The engine is `servekit sim serve` behind a `vllm` stand-in on PATH (tests/tune/
vllm_standin.py): the launcher runs `vllm serve MODEL FLAGS` as it would run vLLM, and the
stand-in simulates the deployment with the candidate's flags, so each candidate's engine
really runs with its own max_num_seqs and speculation, on loopback, in real time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import yaml

from servekit.profiles import load_profile
from servekit.runtime.state import group_alive
from servekit.schemas import schema_documents

pytestmark = [pytest.mark.integration]

HERE = Path(__file__).parent
STANDIN = HERE / "vllm_standin.py"
SLO = "tpot_p50<=6ms,ttft_p99<=200ms"
SPACE = {
    "max_num_seqs": [4, 8, 16],
    "speculative": ["off", 3],
    "max_num_batched_tokens": [2048],
    "gpu_memory_utilization": [0.9],
    "estimate_cudagraphs": [True],
    "enable_chunked_prefill": [True],
    "max_model_len": [2048],
}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Setup:
    """A profile whose model directory the stand-in serves, a PATH with `vllm`, a state dir."""

    profile: Path
    space: Path
    state: Path
    env: dict[str, str]
    root: Path

    def tune(self, out: Path, *extra: str) -> list[str]:
        """The tune command line."""
        return [sys.executable, "-m", "servekit", "tune", str(self.profile), "--slo", SLO,
                "--space", str(self.space), "--requests-per-point", "32", "--launcher", "vllm",
                "--state-dir", str(self.state), "--out", str(out), "--start-estimate-s", "5",
                *extra]  # fmt: skip


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """The stand-in engine's files and environment."""
    base = yaml.safe_load((HERE / "data" / "tiny-tune.yaml").read_text())
    model = tmp_path / "model"
    model.mkdir()
    (model / "servekit-profile.yaml").write_text(
        yaml.safe_dump({**base, "name": "servekit-profile"})
    )
    base["model"]["path"] = str(model)
    base["deploy"]["port"] = _free_port()
    profile = tmp_path / "tiny-tune.yaml"
    profile.write_text(yaml.safe_dump(base))
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    script.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "COLUMNS": "200"}  # fmt: skip
    return Setup(profile, space, tmp_path / "state", env, tmp_path)


def _run(
    setup: Setup, out: Path, *extra: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(setup.tune(out, *extra), capture_output=True, text=True, env=setup.env,
                          timeout=timeout, check=False)  # fmt: skip


def _no_engine_left(setup: Setup) -> None:
    states = list(setup.state.glob("*.json")) if setup.state.exists() else []
    assert states == [], [p.read_text() for p in states]


def test_verify_measures_the_top_candidates_and_chooses_the_measured_best(setup: Setup) -> None:
    """--verify 2 launches the two best candidates one at a time, then the profile as it is
    (not one of them here), measures each around its predicted SLO-meeting load, sets
    predicted against measured goodput (the live simulator agrees with the offline one within
    the bound), picks the measured best, sets it against the profile as it is, predicted and
    measured, writes its profile (extending the input) and leaves no engine behind."""
    out = setup.root / "out"
    done = _run(setup, out, "--verify", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((out / "tune.json").read_text())
    jsonschema.validate(doc, schema_documents()["tune.schema.json"])
    assert doc["candidates_total"] == 6
    verified = doc["verification"]
    as_is = doc["as_is"]
    top = doc["searches"][0]["ranking"][:2]
    assert as_is["id"] not in top
    assert [v["id"] for v in verified] == [*top, as_is["id"]]
    for v in verified:
        assert v["status"] == "measured"
        assert v["points"], v
        assert v["error"] is not None
        assert abs(v["error"]) <= 0.15, v
        assert v["within_bound"]
        assert not v["fitted_on_own"]
        for point in v["points"]:
            assert Path(point["run_dir"], "records.jsonl").is_file()
    best = max((v for v in verified if v["id"] in top), key=lambda v: v["measured_goodput_per_gpu"])
    assert doc["winner"]["id"] == best["id"] == as_is["winner_id"]
    mine = next(v for v in verified if v["id"] == as_is["id"])
    assert as_is["measured_goodput_per_gpu"] == mine["measured_goodput_per_gpu"] > 0
    assert as_is["winner_measured_goodput_per_gpu"] == best["measured_goodput_per_gpu"]
    assert as_is["gain_measured"] == round(
        best["measured_goodput_per_gpu"] / mine["measured_goodput_per_gpu"] - 1, 4
    )
    assert doc["verdict"][0].startswith(
        f"{as_is['gain_predicted']:+.1%} goodput per GPU against your profile as-is "
        f"(predicted; measured {as_is['gain_measured']:+.1%})"
    )
    assert doc["winner"]["chosen_by"] == "measured"
    tuned = load_profile(str(out / doc["winner"]["profile_file"]))
    assert tuned.serve_args.max_num_seqs == doc["winner"]["max_num_seqs"]
    assert (
        "tiny-tune" in doc["winner"]["launch_command"]
        or "vllm serve" in doc["winner"]["launch_command"]
    )
    assert len(doc["model_rounds"]) == 1  # every error within the bound: no refit
    _no_engine_left(setup)
    journal = [json.loads(line) for line in (out / "tune-journal.jsonl").read_text().splitlines()]
    starts = [e for e in journal if e["event"] == "engine_start"]
    stops = [e for e in journal if e["event"] == "engine_stop"]
    assert len(starts) == len(stops) == 3  # the two best, then the profile as it is
    assert (out / "report" / "report.html").is_file()


def _wait_for(path: Path, event: str, timeout_s: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("event") == event:
                    return dict(entry)
        time.sleep(0.1)
    raise AssertionError(f"no {event} in {path} after {timeout_s} s")


def test_kill_9_mid_verification_leaves_no_engine_and_resume_measures_the_rest(
    setup: Setup,
) -> None:
    """SIGKILL right after the first measured point: the watchdog stops the engine within
    seconds (its state is gone, its process group empty); --resume stops nothing more, reuses
    the journaled point and finishes with both candidates and the profile as it is
    verified."""
    out = setup.root / "out"
    proc = subprocess.Popen(setup.tune(out, "--verify", "2"), env=setup.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        measured = _wait_for(out / "tune-journal.jsonl", "measured", 120)
        state_files = list(setup.state.glob("*.json"))
        assert len(state_files) == 1
        pgid = json.loads(state_files[0].read_text())["pid"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 20
    while (group_alive(pgid) or list(setup.state.glob("*.json"))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert group_alive(pgid) == []
    _no_engine_left(setup)
    again = _run(setup, out, "--verify", "2", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "measured before (journal)" in again.stderr
    doc = json.loads((out / "tune.json").read_text())
    assert len(doc["verification"]) == 3
    first = doc["verification"][0]
    assert any(p["load"] == measured["load"] for p in first["points"])
    _no_engine_left(setup)


def test_resume_refuses_other_inputs_and_out_is_not_replaced_without_force(setup: Setup) -> None:
    """A finished run's --out is refused without --force or --resume; --resume with another
    SLO names what changed."""
    out = setup.root / "out"
    assert _run(setup, out).returncode == 0
    again = _run(setup, out)
    assert again.returncode == 2
    assert "already holds a tune run" in again.stderr
    other = subprocess.run(
        [*setup.tune(out, "--resume")[:5], "--slo", "tpot_p50<=9ms",
         *setup.tune(out, "--resume")[7:]],
        capture_output=True, text=True, env=setup.env, timeout=120, check=False,
    )  # fmt: skip
    assert other.returncode == 2
    assert "was tuned with other slo" in other.stderr
    assert _run(setup, out, "--force").returncode == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--slo", "tpot<=5"], "a time needs a unit"),
        (
            ["--verify", "2", "--budget-s", "5", "--start-estimate-s", "120"],
            "--budget-s 5 cannot verify 2 candidate(s)",
        ),
    ],
)
def test_bad_input_is_one_line(setup: Setup, args: list[str], said: str) -> None:
    """A bad SLO string and a budget too small to verify each give one error line, exit 2."""
    out = setup.root / "out"
    command = setup.tune(out)
    if args[0] == "--slo":
        command[command.index("--slo") + 1] = args[1]
        args = []
    done = subprocess.run([*command, *args], capture_output=True, text=True, env=setup.env,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("servekit: error:")]
    assert len(errors) == 1, done.stderr
    assert said in errors[0]
    assert "Traceback" not in done.stderr
    _no_engine_left(setup)


def test_empty_space_and_infeasible_candidates(setup: Setup) -> None:
    """An empty dimension is one line; an infeasible candidate carries its reason."""
    out = setup.root / "out"
    setup.space.write_text(yaml.safe_dump({**SPACE, "max_num_seqs": []}))
    empty = _run(setup, out)
    assert empty.returncode == 1
    assert "max_num_seqs is an empty list, so the space has no candidate" in empty.stderr
    setup.space.write_text(yaml.safe_dump({**SPACE, "max_num_batched_tokens": [8, 2048]}))
    done = _run(setup, out)
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "tune.json").read_text())
    refused = [c for c in doc["candidates"] if not c["feasible"]]
    assert refused
    assert all("below max_num_seqs" in c["reason"] for c in refused)


def test_sigterm_stops_like_ctrl_c_with_the_engine_stopped(setup: Setup) -> None:
    """SIGTERM (docker stop, timeout) mid-verification: tune stops its engine itself, says
    how to continue in one line and exits 143."""
    out = setup.root / "out"
    proc = subprocess.Popen(setup.tune(out, "--verify", "2"), env=setup.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _wait_for(out / "tune-journal.jsonl", "measured", 120)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("servekit: error:")]
    assert len(errors) == 1, stderr
    assert "--resume" in errors[0]
    assert "Traceback" not in stderr
    _no_engine_left(setup)


def test_kill_9_mid_search_then_resume_finishes(tmp_path: Path) -> None:
    """SIGKILL while the search runs (nothing measured, no engine yet): --resume with the
    same options finishes the run."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "servekit", "tune", "minimax-m3-mxfp8-8xa800", "--slo",
               "per_stream_p50>=60tok/s", "--temperature", "0.7", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(out / "tune-journal.jsonl", "inputs", 60)
        assert proc.stderr is not None
        for line in proc.stderr:  # the search has begun
            if "searching in the simulator" in line:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert not (out / "tune.json").exists()
    again = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600,
                           check=False)  # fmt: skip
    assert again.returncode == 0, again.stderr
    doc = json.loads((out / "tune.json").read_text())
    assert doc["winner"]["load"] == 2
