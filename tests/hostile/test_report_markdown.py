"""report.md and report.html with hostile text from the server and the model: a /version
that closes the code fence, HTML, links, images and table breaks stay literal text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt

from servekit.bench.store import write_summary_tables
from servekit.cli.main import cli
from servekit.report.build import write_report
from servekit.report.verdict import Recommendation
from servekit.results.summary import load_summary

PROFILE = "minimax-m3-mxfp8-8xa800"
# what a hostile or broken server can send as /version, a model name or model output
VERSION = "0.32.0\n```\n<script>alert(1)</script>\n```\n# pwned\n[click](javascript:alert(2))"
MODEL = "m3 ![t](http://tracker.invalid/p.png) | injected | cell"
DETAIL = "answer ```` <img src=x onerror=alert(3)> [a](javascript:alert(4)) *bold*"
# a run directory's name (the verdict's label for the run) and a failed check's name
LABEL = "# r<img src=x onerror=alert(5)> [l](javascript:alert(6)) *e* ![i](i.png)"  # no /
CHECK = "<b>ladder</b> | cell"


@pytest.fixture
def hostile_run(tmp_path: Path) -> Path:
    """A simulated run whose summary carries the hostile server text."""
    run = tmp_path / "run"
    result = CliRunner().invoke(cli, ["sim", "run", "--profile", PROFILE, "--concurrency", "1",
                                      "--requests-per-point", "4", "--output-len", "8",
                                      "--out", str(run)])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    doc["target"]["server_version"] = VERSION
    doc["target"]["model"] = MODEL
    (run / "summary.json").write_text(json.dumps(doc), encoding="utf-8")
    return run


def test_hostile_server_text_stays_text_in_markdown_and_html(
    hostile_run: Path, tmp_path: Path
) -> None:
    """Rendered as CommonMark (raw HTML allowed, as GitHub's viewer does in part), report.md
    holds no script, foreign image, javascript: link or heading from the server; the
    version stays inside its code block; report.html escapes all of it."""
    validate = tmp_path / "validate.json"
    check = {"name": "chat", "status": "pass", "detail": DETAIL, "duration_s": 0.1}
    validate.write_text(json.dumps({"passed": True, "checks": [check]}), encoding="utf-8")
    out = tmp_path / "report"
    result = CliRunner().invoke(
        cli, ["report", str(hostile_run), "--validate", str(validate), "--out", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    markdown = (out / "report.md").read_text(encoding="utf-8")
    md = MarkdownIt("commonmark").enable("table")
    blocks = md.parse(markdown)
    tokens = [t for block in blocks for t in (block, *(block.children or []))]
    assert not [t.content for t in tokens if t.type in ("html_block", "html_inline")]
    links = [t.attrGet("href") for t in tokens if t.type == "link_open"]
    assert links == []  # no link at all: servekit writes none, the server's became text
    images = [str(t.attrGet("src")) for t in tokens if t.type == "image"]
    assert images
    assert all(src.endswith(".png") and "/" not in src for src in images)
    headings = [blocks[i + 1].content for i, t in enumerate(blocks) if t.type == "heading_open"]
    assert headings[1:] == ["Verdict", "Runs", "Functional validation", "Plots",
                            "Provenance: run"]  # fmt: skip
    code = [t.content for t in tokens if t.type == "fence"]
    assert any(VERSION in block for block in code)  # the version stayed inside its block
    rendered = md.render(markdown)
    assert "<script" not in rendered
    assert "<img src=x" not in rendered
    assert "<em>bold</em>" not in rendered
    assert "*bold*" in rendered
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_summary_md_keeps_the_servers_model_name_literal(hostile_run: Path) -> None:
    """bench's summary.md titles the table with the server's model name: it stays text."""
    summary = load_summary(json.loads((hostile_run / "summary.json").read_text("utf-8")))
    write_summary_tables(hostile_run, summary)
    markdown = (hostile_run / "summary.md").read_text(encoding="utf-8")
    tokens = [t for b in MarkdownIt("commonmark").enable("table").parse(markdown)
              for t in (b, *(b.children or []))]  # fmt: skip
    assert not [t for t in tokens if t.type in ("image", "link_open", "html_inline")]
    header = next(t for t in tokens if t.type == "inline")
    assert header.content.startswith("servekit bench: m3 \\!\\[t\\]")


def test_dollar_signs_in_run_and_model_names_plot_as_text(tmp_path: Path) -> None:
    """Run directories and a model name with `$` (matplotlib's mathtext marker, and a bad
    expression between two of them) go through the real report build, with --compare and
    the turn plot: every plot is written and the names stay literal in the page."""
    runs = []
    for name in (r"a$\frac$", "b$x$"):
        run = tmp_path / name
        result = CliRunner().invoke(cli, ["sim", "run", "--profile", PROFILE, "--concurrency",
                                          "1,2", "--turns", "2", "--sessions", "2",
                                          "--input-len", "64", "--output-len", "8",
                                          "--out", str(run)])  # fmt: skip
        assert result.exit_code == 0, result.stderr
        doc = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        doc["target"]["model"] = "m$\\sqrt{$"
        (run / "summary.json").write_text(json.dumps(doc), encoding="utf-8")
        runs.append(str(run))
    out = tmp_path / "report"
    result = CliRunner().invoke(
        cli, ["report", *runs, "--compare", *runs, "--out", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    plots = sorted(p.name for p in out.glob("*.png"))
    assert {"ab_deltas.png", "ttft_by_turn.png"} <= set(plots)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert r"B = b$x$ against A = a$\frac$" in page


def test_hostile_text_in_the_verdict_stays_text(hostile_run: Path, tmp_path: Path) -> None:
    """The verdict quotes a run's directory name, a failed check's name and detail, and a
    recommendation's text: in report.md they make no HTML, link, image, emphasis or heading
    inside the verdict's box; report.html escapes them."""
    run = tmp_path / LABEL
    shutil.copytree(hostile_run, run)
    validate = tmp_path / "validate.json"
    check = {"name": CHECK, "status": "fail", "detail": DETAIL, "duration_s": 0.1}
    validate.write_text(json.dumps({"passed": False, "checks": [check]}), encoding="utf-8")
    advice = Recommendation(f"use {DETAIL}", (VERSION,), source=LABEL)
    out = tmp_path / "report"
    write_report([run], out, validate=validate, recommendation=advice)
    markdown = (out / "report.md").read_text(encoding="utf-8")
    verdict = markdown.split("\n## Verdict\n", 1)[1].split("\n## ", 1)[0]
    md = MarkdownIt("commonmark").enable("table")
    blocks = md.parse(verdict)
    assert [b.type for b in blocks][:3] == ["blockquote_open", "bullet_list_open", "list_item_open"]
    assert [b.type for b in blocks][-1] == "blockquote_close"
    assert not [b for b in blocks if b.type in ("heading_open", "fence", "code_block")]
    tokens = [t for block in blocks for t in (block, *(block.children or []))]
    kinds = {t.type for t in tokens}
    assert not kinds & {"html_block", "html_inline", "link_open", "image", "em_open"}
    # validation, per-stream target (the profile's), recommended, setting, the run
    assert len([t for t in tokens if t.type == "list_item_open"]) == 5
    rendered = md.render(verdict)
    assert "<b>" not in rendered
    assert "<img" not in rendered
    assert "*e*" in rendered
    assert (
        "<strong>validation:</strong> FAILED: &lt;b&gt;ladder&lt;/b&gt; | cell (answer" in rendered
    )
    page = (out / "report.html").read_text(encoding="utf-8")
    box = page.split('<div class="highlights">', 1)[1].split("</div>", 1)[0]
    for raw in ("<b>ladder", "<img src=x", "<script>"):
        assert raw not in box
    assert "<strong># r&lt;img src=x onerror=alert(5)&gt; [l](javascript:alert(6)) *e*" in box
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in box  # the setting line
