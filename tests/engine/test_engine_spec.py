"""Speculative decoding on real vLLM: bench's acceptance equals /metrics counter deltas;
a draft equal to the target accepts about k+1 tokens per step, another draft few."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.bench.scrape import parse_metrics
from servekit.cli.main import cli

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]
K = 3


def _counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:  # noqa: S310 - loopback
        return parse_metrics(resp.read().decode()).counters


def _bench(url: str, out: Path) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [
        "bench", "--url", url, "--concurrency", "2", "--requests-per-point", "12", "--warmup", "0",
        "--input-len", "32", "--output-len", "24", "--out", str(out), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout)["points"][0]["server"])


def _acceptance(before: dict[str, float], after: dict[str, float]) -> float:
    drafts = after["vllm:spec_decode_num_drafts"] - before["vllm:spec_decode_num_drafts"]
    accepted = (after["vllm:spec_decode_num_accepted_tokens"]
                - before["vllm:spec_decode_num_accepted_tokens"])  # fmt: skip
    return 1 + accepted / drafts


def test_equal_draft_accepts_nearly_everything(vllm_spec_equal: Any, tmp_path: Path) -> None:
    """bench's acceptance length is the counters' delta, and near k+1 = 4."""
    before = _counters(vllm_spec_equal.url)
    server = _bench(vllm_spec_equal.url, tmp_path)
    after = _counters(vllm_spec_equal.url)
    assert server["spec_acceptance_length"] == pytest.approx(_acceptance(before, after), abs=1e-9)
    assert server["spec_acceptance_length"] >= K + 1 - 0.5
    assert len(server["spec_acceptance_per_position"]) == K


def test_other_draft_accepts_few(vllm_spec_rand: Any, tmp_path: Path) -> None:
    """A draft with other weights: acceptance length clearly lower (under 2), and still the
    counters' delta; validate's spec-decode check sees it in range."""
    before = _counters(vllm_spec_rand.url)
    server = _bench(vllm_spec_rand.url, tmp_path)
    after = _counters(vllm_spec_rand.url)
    assert server["spec_acceptance_length"] == pytest.approx(_acceptance(before, after), abs=1e-9)
    assert server["spec_acceptance_length"] < 2.0
    result = CliRunner().invoke(
        cli, ["validate", "--url", vllm_spec_rand.url, "--only", "spec-decode", "--json"]
    )
    check = json.loads(result.stdout)["checks"][-1]
    assert check["status"] == "pass", check
