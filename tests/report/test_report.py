"""servekit report: files, escaping, and the page in headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from matplotlib.image import imread

from servekit.cli.main import cli

pytestmark = pytest.mark.integration
PROFILE = "minimax-m3-mxfp8-8xa800"
HOSTILE = "<script>alert(1)</script>"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two simulated sweeps: EAGLE3 on and off."""
    base = tmp_path_factory.mktemp("runs")
    out = []
    for name in (PROFILE, f"{PROFILE}-no-eagle3"):
        result = CliRunner().invoke(cli, [
            "sim", "run", "--profile", name, "--concurrency", "1,4,16",
            "--requests-per-point", "24", "--out", str(base / name),
        ])  # fmt: skip
        assert result.exit_code == 0, result.stderr
        out.append(base / name)
    return out[0], out[1]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is missing: bash scripts/bootstrap --with-engine installs it"
    return path


def test_report_writes_html_markdown_and_plots(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Both runs, the comparison and a validate.json make one page; model output is escaped."""
    on, off = runs
    validate = tmp_path / "validate.json"
    check = {"name": "chat", "status": "pass", "detail": f"answer {HOSTILE}", "duration_s": 0.1}
    validate.write_text(json.dumps({"passed": True, "checks": [check]}))
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, [
        "report", str(on), str(off), "--compare", str(off), str(on),
        "--validate", str(validate), "--out", str(out), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    written = json.loads(result.stdout)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "http" not in page.replace("http://", "").split("<body", 1)[0]  # no external head
    assert 'src="http' not in page
    names = {Path(p).name for p in written["plots"]}
    assert {"throughput.png", "latency.png", "per_stream.png", "ttft.png", "itl.png",
            "ab_deltas.png", "acceptance.png"} <= names  # fmt: skip
    assert any(n.startswith("server_") for n in names)
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "![Output throughput vs concurrency](throughput.png)" in markdown
    assert "Recommendation: enable EAGLE3 at concurrency" in markdown
    verdict = markdown.split("\n## ", 2)[1]  # the first section
    assert verdict.startswith("Verdict\n\n> - **validation:** passed (1 check: 1 pass)\n")
    assert "> - **recommended:** enable EAGLE3 at concurrency" in verdict
    assert page.index('<div class="highlights">') < page.index("<table")
    assert "vllm serve" in page  # the rendered launch command in the provenance


def test_report_renders_in_headless_chromium(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Chromium renders the page, every plot loads, the screenshot is not blank, and the
    hostile text is text (no script ran: the title is unchanged, no dialog)."""
    on, off = runs
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["report", str(on), str(off), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    url = (out / "report.html").as_uri()
    dom = subprocess.run(
        [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p1'}",
         "--virtual-time-budget=5000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    expected = dom.stdout.split('data-plots-expected="', 1)[1].split('"', 1)[0]
    rendered = dom.stdout.split('data-plots-rendered="', 1)[1].split('"', 1)[0]
    assert int(expected) >= 7
    assert rendered == expected
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p2'}",
         "--window-size=1200,2000", f"--screenshot={shot}", url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    pixels = imread(str(shot))
    assert pixels.shape[0] >= 1000
    assert float(pixels[..., :3].std()) > 0.05  # not one flat colour
    # the verdict's tinted box (#f4f7fb) is drawn on the first screen
    tint = (abs(pixels[:900, :, :3] - [0xF4 / 255, 0xF7 / 255, 0xFB / 255]) < 0.01).all(axis=2)
    assert int(tint.sum()) > 20_000
