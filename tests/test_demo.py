"""servekit demo: the journey on the simulator, and the crash it must catch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.reference import SEED_TABLE

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SEED = {p.concurrency: (p.output_throughput_tok_s, p.avg_latency_s) for p in SEED_TABLE}


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
    """The table is within 10% of the deployment's figures, the recommendation comes from
    the data and says EAGLE3 pays up to concurrency 4, the report is written, and no
    simulator is left running."""
    done = _demo("--quick", "--out", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["recommendation"].startswith("enable EAGLE3 at concurrency <= 4;")
    summary = json.loads((tmp_path / "eagle3-t0.7" / "summary.json").read_text(encoding="utf-8"))
    assert summary["time_scale"] == 0.1
    by_c = {p["concurrency"]: p for p in summary["points"]}
    for c, (tput, latency) in SEED.items():
        assert by_c[c]["output_throughput_tok_s"] == pytest.approx(tput, rel=0.10), c
        assert by_c[c]["latency_s"]["mean"] == pytest.approx(latency, rel=0.10), c
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
