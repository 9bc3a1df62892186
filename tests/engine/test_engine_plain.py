"""servekit against real vLLM (CPU) with M3's parsers: validate, plan --from-log, bench
side by side with vLLM's own `vllm bench serve`."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.bench.scrape import parse_metrics
from servekit.bench.store import read_records
from servekit.cli.main import cli

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]


def _run(*args: str) -> tuple[int, Any, str]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout) if result.stdout else None, result.stderr


def test_validate_passes_through_the_real_m3_parsers(vllm_plain: Any, tmp_path: Path) -> None:
    """Every check passes (reasoning and tool calls through vLLM's minimax_m3 parsers)."""
    code, doc, _ = _run(
        "validate",
        "--url",
        vllm_plain.url,
        "--thinking-kwargs",
        '{"thinking_mode": "enabled"}',
        "--log",
        str(vllm_plain.log),
        "--out",
        str(tmp_path),
    )
    statuses = {c["name"]: (c["status"], c["detail"]) for c in doc["checks"]}
    assert code == 0, statuses
    for name in (
        "health",
        "models",
        "chat",
        "reasoning",
        "tool_calls",
        "long_context",
        "context_overflow",
        "ladder",
    ):
        assert statuses[name][0] == "pass", (name, statuses[name])
    assert statuses["spec_decode"][0] == "skip"
    assert "get_weather" in statuses["tool_calls"][1]


def test_plan_reads_the_real_startup_log(vllm_plain: Any) -> None:
    """`plan --from-log` finds the KV capacity line of vLLM's own log (CPU wording)."""
    code, doc, err = _run("plan", "minimax-m3-mxfp8-8xa800", "--from-log", str(vllm_plain.log))
    assert code == 0, err
    figures = {f["name"]: f["actual"] for f in doc["from_log"]["figures"]}
    log = vllm_plain.log.read_text(encoding="utf-8", errors="replace")
    tokens = re.search(r"KV cache size: ([\d,]+) tokens", log)
    assert tokens is not None
    assert figures["KV cache tokens"] == int(tokens.group(1).replace(",", ""))
    assert figures["max concurrency"] is not None
    assert doc["from_log"]["failures"] == []


def test_bench_counts_exactly_what_vllm_generated(vllm_plain: Any, tmp_path: Path) -> None:
    """Against the real engine, servekit's token accounting equals vLLM's own counters: every
    request gets exactly its 32 tokens, and the client's output and prompt token totals equal
    the deltas of vllm:generation_tokens_total and vllm:prompt_tokens_total.

    (The timing comparison with `vllm bench serve` is benchmarks/bench_vllm_agreement.py: on
    this 2-core machine the server alone moves by up to +-25% between identical runs, too
    much for a test to assert a 10% agreement; benchmarks/README.md records the figures.)
    """
    before = _counters(vllm_plain.url)
    code, summary, err = _run(
        "bench", "--url", vllm_plain.url, "--concurrency", "4", "--requests-per-point", "40",
        "--warmup", "0", "--input-len", "48", "--output-len", "32", "--token-ids", "on",
        "--out", str(tmp_path),
    )  # fmt: skip
    after = _counters(vllm_plain.url)
    assert code == 0, err
    point = summary["points"][0]
    records = read_records(tmp_path)
    assert point["failed"] == 0
    assert [r.output_tokens for r in records] == [32] * 40
    assert all(sum(r.chunk_tokens) == 32 for r in records)
    assert point["server"]["generation_tokens"] == 40 * 32
    prompt_delta = after["vllm:prompt_tokens"] - before["vllm:prompt_tokens"]
    assert prompt_delta == sum(r.prompt_tokens for r in records)
    assert all(r.prompt_tokens == 48 for r in records)  # sized exactly with /tokenize
    assert not any("generated" in w for w in point["client"]["warnings"])


def _counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:  # noqa: S310 - loopback
        return parse_metrics(resp.read().decode()).counters
