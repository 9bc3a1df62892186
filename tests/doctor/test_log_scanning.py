"""Whole-text scanning: line numbers, the startup-log hints, and knowledge-base pattern rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servekit.kb import known_issues, match_log_lines
from servekit.lines import line_starts, matching_lines
from servekit.plan.startup_log import parse_startup_log
from servekit.plan.startup_patterns import LINE_HINTS, LINE_RES

TESTS = Path(__file__).parents[1]
SAMPLE_LOGS = sorted(
    [*TESTS.glob("plan/data/*.log"), *TESTS.glob("doctor/data/*.log"),
     *TESTS.glob("render/data/*.log")]
)  # fmt: skip
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


@given(st.lists(st.text(alphabet="ab x\r", max_size=12), min_size=1, max_size=30))
def test_matching_lines_equals_per_line_search(lines: list[str]) -> None:
    """Scanning the joined text finds exactly the lines a per-line search finds."""
    patterns = [re.compile("ab"), re.compile("x a")]
    expected = [i for i, line in enumerate(lines) if any(p.search(line) for p in patterns)]
    assert matching_lines(patterns, "\n".join(lines), line_starts(lines)) == expected


@pytest.mark.parametrize("path", SAMPLE_LOGS, ids=lambda p: p.name)
def test_every_line_a_pattern_reads_carries_a_hint(path: Path) -> None:
    """The literal hints that pick lines cover every line any startup-log pattern matches."""
    for line in path.read_text(errors="replace").splitlines():
        clean = ANSI.sub("", line)
        if any(p.search(clean) for p in LINE_RES):
            assert any(h.search(clean) for h in LINE_HINTS), clean


@pytest.mark.parametrize(
    "line",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "torch.cuda.OutOfMemoryError: oops",
        "RuntimeError: CUDA error: an Illegal memory access was encountered",
        "ERROR: Worker proc VllmWorker-3 died unexpectedly, shutting down executor.",
        "ERROR: Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        "ValueError: To serve at least one request with the models's max seq len (131072), ...",
        "INFO Starting vLLM API server 0 on http://0.0.0.0:8000 with version 0.26.0",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ],
)
def test_hints_cover_each_failure_wording(line: str) -> None:
    """Each failure wording the parser knows is found through the hints too."""
    assert any(p.search(line) for p in LINE_RES)
    assert parse_startup_log(f"noise\n{line}\nnoise").found_any


def test_knowledge_base_patterns_stay_on_one_line_and_start_with_text() -> None:
    """Patterns are searched over the whole log: none may cross a line break, and each
    starts with literal text so a long log scans at memory speed."""
    for issue in known_issues():
        for pattern in issue.symptoms.log_patterns:
            assert "\\s" not in pattern, (issue.id, pattern)
            assert not re.search(r"\[\^(?![^\]]*\\n)", pattern), (issue.id, pattern)
            assert re.match(r"[A-Za-z]", pattern), (issue.id, pattern)


def test_block_size_issue_matches_the_error_not_the_config_line() -> None:
    """The M3 block-size entry names an engine refusing another block size, never the
    `'block_size': 128` in a healthy start's arguments."""
    healthy = "INFO non-default args: {'model': '/models/MiniMax-M3', 'block_size': 128}"
    assert not match_log_lines([healthy], model="MiniMax-M3")
    for error in (
        "ValueError: MiniMax-M3 sparse attention only supports block size 128, got 16",
        "ValueError: block_size must be 128 for the sparse indexer",
    ):
        ids = [m.issue.id for m in match_log_lines([error], model="MiniMax-M3")]
        assert ids == ["m3-block-size-128"], error
