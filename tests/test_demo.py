"""servekit demo: the journey on the simulator, and the crash it must catch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.analyze.compare import MIN_SPEC_GAIN_PCT
from servekit.reference import FIT_BOUND, HELD_OUT_BOUND, SEED_TABLE, is_fitted
from servekit.schemas import check_command_output

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SEED = {p.concurrency: (p.output_throughput_tok_s, p.avg_latency_s) for p in SEED_TABLE}
# The quick demo sends max(2c, 16) requests per level, not the calibration's 256, so ramp and
# tail weigh more: over simulation seeds 1-10 (scripts/calibrate_sim.py --evaluate --seeds 10)
# the largest error offline at the demo's counts exceeds the stated bound (servekit.reference)
# by 1.1 points at c=1 (3.1% against 2%), 0.6 at c=4 (10.6% against 10%), 7.6 at c=16 (9.6%
# against 2%) and not at all at c=128 (21.1% against 22%).
SAMPLE_MARGIN = {1: 0.011, 4: 0.006, 16: 0.076, 128: 0.0}
# The live server at time scale 0.1 against the offline engine: before the live driver's fix
# three quick demos on a shared machine fell at most 4.5 points outside the offline spread
# over seeds (c=4 throughput -15.1% against at most -10.6%); after it (2026-12-01, load 1-3)
# three fell at most 1.3 points outside (c=4 latency +11.9% against 10.6%). The margin keeps
# the larger figure: three runs are too few to size it down.
LIVE_MARGIN = 0.045
# Where EAGLE3 pays, as the deployment states it (on at concurrency <= 4, off from 8 on), and
# as the model predicts it robustly: its gain at c=8 lies within 2 points of compare's
# threshold (offline over seeds 1-10: -3.6% to +3.1% at the demo's counts, +4.0% to +5.6% at
# 256 requests; three live quick demos on main gave +5.3%, +4.8%, +3.0%), so the advice at
# the c=4/c=8 boundary ("<= 4" or "<= 8") is not asserted: docs/simulator.md section 3 gives
# the model's gap there. Asserted: EAGLE3 pays at 1 and 4 and not from 16 on.
PAYS, DOES_NOT_PAY = (1, 4), (16, 128)


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
    comes from the data: EAGLE3 pays at concurrency 1 and 4 and not from 16 on (the boundary
    at 8 is the model's open gap); the report is written, and no simulator is left running."""
    done = _demo("--quick", "--out", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = check_command_output("demo", done.stdout)  # its schema and model
    assert result["recommendation"].startswith(
        ("enable EAGLE3 at concurrency <= 4;", "enable EAGLE3 at concurrency <= 8;")
    ), result["recommendation"]
    summary = json.loads((tmp_path / "eagle3-t0.7" / "summary.json").read_text(encoding="utf-8"))
    off = json.loads((tmp_path / "no-eagle3-t0.7" / "summary.json").read_text(encoding="utf-8"))
    off_tput = {p["concurrency"]: p["output_throughput_tok_s"] for p in off["points"]}
    on_tput = {p["concurrency"]: p["output_throughput_tok_s"] for p in summary["points"]}
    gain_pct = {c: 100 * (on_tput[c] / off_tput[c] - 1) for c in on_tput}
    assert all(gain_pct[c] >= MIN_SPEC_GAIN_PCT for c in PAYS), gain_pct
    assert all(gain_pct[c] < MIN_SPEC_GAIN_PCT for c in DOES_NOT_PAY), gain_pct
    assert summary["time_scale"] == 0.1
    by_c = {p["concurrency"]: p for p in summary["points"]}
    for c, (tput, latency) in SEED.items():
        assert by_c[c]["output_throughput_tok_s"] == pytest.approx(tput, rel=_bound(c)), c
        assert by_c[c]["latency_s"]["mean"] == pytest.approx(latency, rel=_bound(c)), c
    labels = [line.split("|")[1].strip() for line in result["table"][1:]]  # type: ignore[index, union-attr]
    assert labels == ["fitted" if is_fitted(c) else "held out" for c in SEED]
    assert Path(result["report"]).is_file()
    markdown = Path(result["report"]).with_suffix(".md").read_text(encoding="utf-8")
    verdict = markdown.split("\n## ", 2)[1]  # the report leads with its verdict
    assert verdict.startswith("Verdict\n\n> - **validation:** passed ("), verdict
    assert "> - **recommended:** enable EAGLE3 at concurrency" in verdict
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
