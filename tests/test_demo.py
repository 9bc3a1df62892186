"""servekit demo: the journey on the simulator, and the crash it must catch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.reference import FIT_BOUND, HELD_OUT_BOUND, SEED_TABLE, is_fitted

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SEED = {p.concurrency: (p.output_throughput_tok_s, p.avg_latency_s) for p in SEED_TABLE}
# The quick demo sends max(2c, 16) requests per level, not the calibration's 256, so ramp and
# tail weigh more: over simulation seeds 1-10 (scripts/calibrate_sim.py --evaluate --seeds 10)
# the largest error offline at the demo's counts exceeds the stated bound (servekit.reference)
# by 1.1 points at c=1 (3.1% against 2%), 0.6 at c=4 (10.6% against 10%), 7.6 at c=16 (9.6%
# against 2%) and not at all at c=128 (21.1% against 22%).
SAMPLE_MARGIN = {1: 0.011, 4: 0.006, 16: 0.076, 128: 0.0}
# The live server at time scale 0.1 (main's live driver) against the offline engine: in three
# quick demos on a shared machine (2026-12-01) the live figures fell at most 4.5 points
# outside the offline spread over seeds (c=4 throughput -15.1% against at most -10.6%; c=1
# about 3% slower in each). A fourth demo run while a test suite used the other core lagged
# far more (c=128 latency +68.6%) and is not covered: the live driver's drift is being fixed
# at its cause (docs/simulator.md section 3).
LIVE_MARGIN = 0.045


def _bound(concurrency: int) -> float:
    """The stated error of the calibration at a row, plus the demo's sample and live margins."""
    stated = FIT_BOUND if is_fitted(concurrency) else HELD_OUT_BOUND[concurrency]
    return stated + SAMPLE_MARGIN[concurrency] + LIVE_MARGIN


def _sim_servers() -> list[str]:
    """Command lines of live `servekit sim serve` processes started by a demo."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "servekit sim serve" in cmd and "--port 0" in cmd:
            found.append(cmd)
    return found


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servekit", "demo", *args], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip


def test_quick_demo_reproduces_the_deployment(tmp_path: Path) -> None:
    """Each row of the table is within the calibration's stated error of the deployment's
    figures (the fit's bound at the fitted rows, the held-out bound at the others) plus the
    demo's sample and live margins, and is labelled fitted or held out; the recommendation
    comes from the data and says EAGLE3 pays up to concurrency 4; the report is written, and
    no simulator is left running."""
    done = _demo("--quick", "--out", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["recommendation"].startswith("enable EAGLE3 at concurrency <= 4;")
    summary = json.loads((tmp_path / "eagle3-t0.7" / "summary.json").read_text(encoding="utf-8"))
    assert summary["time_scale"] == 0.1
    by_c = {p["concurrency"]: p for p in summary["points"]}
    for c, (tput, latency) in SEED.items():
        assert by_c[c]["output_throughput_tok_s"] == pytest.approx(tput, rel=_bound(c)), c
        assert by_c[c]["latency_s"]["mean"] == pytest.approx(latency, rel=_bound(c)), c
    labels = [line.split("|")[1].strip() for line in result["table"][1:]]
    assert labels == ["fitted" if is_fitted(c) else "held out" for c in SEED]
    assert Path(result["report"]).is_file()
    assert (tmp_path / "launch" / "vllm-serve.sh").is_file()
    assert json.loads((tmp_path / "validate" / "validate.json").read_text())["passed"]
    assert _sim_servers() == []


def test_demo_with_the_crash_stops_at_validate(tmp_path: Path) -> None:
    """With the engine crashing at concurrency 2, validate's ladder diagnoses it, the demo
    stops before any load test and exits 3, leaving no simulator behind."""
    done = _demo("--quick", "--fault", "crash-at-concurrency=2", "--out", str(tmp_path))
    assert done.returncode == 3, done.stderr[-3000:]
    assert "engine died at concurrency 2" in done.stdout + done.stderr
    assert "stopping before load testing" in done.stderr
    assert "m3-topk-layout-triton" in done.stdout + done.stderr
    assert not (tmp_path / "eagle3-t0.7").exists()
    assert _sim_servers() == []


def test_demo_rejects_an_unknown_fault(tmp_path: Path) -> None:
    """A mistyped fault is a usage error before anything starts."""
    done = _demo("--fault", "crash-at=2", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "--fault 'crash-at=2'" in done.stderr
