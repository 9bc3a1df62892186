"""`servekit logs analyze`: figures, failure lines and the known issues they name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from servekit.doctor.log_analysis import analyze_log

DATA = Path(__file__).parent / "data"
PLAN_DATA = Path(__file__).parents[1] / "plan" / "data"
M3_CRASH = DATA / "m3_v0251_illegal_memory_access.log"
M3_HEALTHY = PLAN_DATA / "m3_a800_tp8.log"
QWEN_CRASH = PLAN_DATA / "crash_illegal_memory_access.log"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servekit", *args],
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_m3_crash_on_v0251_names_the_topk_layout_issue_first() -> None:
    """An illegal memory access of MiniMax-M3 on 0.25.1 is matched to the top-k bug."""
    analysis = analyze_log(M3_CRASH.read_text())
    assert analysis.failed
    assert analysis.figures.vllm_version == "0.25.1"
    assert analysis.figures.model == "/models/MiniMax-M3-MXFP8"
    first = analysis.issues[0]
    assert first.issue.id == "m3-topk-layout-triton"
    assert first.on_failure
    assert any("illegal memory access" in text for _, text in first.lines)
    assert "#49149" in first.issue.fix.summary
    assert "disputed" in first.issue.fixed_in
    kinds = [f.kind for f in analysis.figures.failures]
    assert kinds == [
        "illegal_memory_access",
        "engine_fatal",
        "illegal_memory_access",
        "engine_dead",
    ]


def test_quoted_lines_carry_no_ansi_codes() -> None:
    """Matched lines are shown without terminal colour codes."""
    analysis = analyze_log(M3_CRASH.read_text())
    assert all("\x1b" not in text for hit in analysis.issues for _, text in hit.lines)


def test_a_qwen_crash_is_not_blamed_on_the_m3_bug() -> None:
    """The same crash text from another model names only the dead-engine entry."""
    analysis = analyze_log(QWEN_CRASH.read_text())
    ids = [hit.issue.id for hit in analysis.issues]
    assert "m3-topk-layout-triton" not in ids
    assert "engine-dead" in ids


def test_sm100_gpus_rule_the_m3_issue_out() -> None:
    """The bug is on the non-SM100 Triton path: a B200 (sm 10.0) is not affected."""
    analysis = analyze_log(M3_CRASH.read_text(), compute_capability="10.0")
    assert "m3-topk-layout-triton" not in [hit.issue.id for hit in analysis.issues]


def test_a_version_before_the_bug_rules_it_out() -> None:
    """A 0.23 log with the same crash does not name an issue that starts at 0.24.0."""
    text = M3_CRASH.read_text().replace("0.25.1", "0.23.0")
    assert "m3-topk-layout-triton" not in [h.issue.id for h in analyze_log(text).issues]


def test_healthy_log_reports_capacity_and_no_failure_issue() -> None:
    """A healthy start: capacity figures, no failure, informational matches only."""
    analysis = analyze_log(M3_HEALTHY.read_text())
    assert not analysis.failed
    assert analysis.started
    assert analysis.figures.kv_cache_tokens == 241_664
    assert all(not hit.on_failure for hit in analysis.issues)


def test_cli_crash_exits_3_and_prints_issue_and_fix() -> None:
    """The CLI names the issue, its fix and the matching line, and exits 3."""
    done = _cli("logs", "analyze", str(M3_CRASH))
    assert done.returncode == 3, done.stderr
    assert "known issue m3-topk-layout-triton" in done.stdout
    assert "PR #49149" in done.stdout
    assert "illegal memory access" in done.stdout


def test_cli_healthy_log_prints_capacity_and_exits_0() -> None:
    """On a healthy log the CLI prints the KV capacity and exits 0."""
    done = _cli("logs", "analyze", str(M3_HEALTHY))
    assert done.returncode == 0, done.stderr
    assert "KV capacity: 241,664 tokens, max concurrency 1.84x at 131,072 tokens" in done.stdout
    assert "weights: 58.50 GiB per GPU" in done.stdout
    assert "verdict: healthy start" in done.stdout


def test_cli_json_document() -> None:
    """--json carries figures, failures with line numbers, and issues with fixes."""
    done = _cli("logs", "analyze", str(M3_CRASH), "--json")
    document = json.loads(done.stdout)
    assert document["failed"] is True
    assert document["vllm_version"] == "0.25.1"
    assert document["figures"]["kv_cache_tokens"] == 241_664
    assert document["failures"][0]["kind"] == "illegal_memory_access"
    issue = document["known_issues"][0]
    assert issue["id"] == "m3-topk-layout-triton"
    assert issue["fix"]["patch"].endswith("49149.diff")
    assert issue["lines"][0]["line"] == document["failures"][0]["line"]
    assert isinstance(document["kb_version"], int)


def test_cli_unreadable_and_empty_logs_are_clear_errors(tmp_path: Path) -> None:
    """A missing file is a usage error; a file with nothing of vLLM's is exit 1."""
    missing = _cli("logs", "analyze", str(tmp_path / "nope.log"))
    assert missing.returncode == 2
    assert "nope.log" in missing.stderr
    empty = tmp_path / "empty.log"
    empty.write_text("hello\nworld\n")
    result = _cli("logs", "analyze", str(empty))
    assert result.returncode == 1
    assert "holds no vLLM startup figures" in result.stderr


def test_cli_unknown_gpu_is_an_error_naming_it() -> None:
    """--gpu takes a catalog name; an unknown one is named."""
    done = _cli("logs", "analyze", str(M3_CRASH), "--gpu", "Z9000")
    assert done.returncode != 0
    assert "Z9000" in done.stderr
