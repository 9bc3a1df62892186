"""servekit bench and vLLM's own `vllm bench serve` agree on one workload (issues #6, #13).

The protocol (tests/engine/agreement.py): the tiny target on a server pinned to one core
with prefix caching off, each client pinned to the other core, 1024-token prompts (as the
server counts vLLM's random prompts) and 64 tokens out, open loop at 3 requests/s with
near-constant arrivals, six rounds of 60 requests with the tools' order alternating.
Asserted: output throughput pooled over the rounds within 10%, and each tool's mean TTFT
set against the engine's own `vllm:time_to_first_token_seconds` histogram for its requests:
both offsets positive, servekit's no larger than vLLM's tool's plus MARGIN_MS. A ratio of
mean TTFTs is not asserted: the clients' offset is a fixed 3-6 ms (HTTP and the API
server's output path) while the engine's own TTFT moves 10-20% between rounds, so a 10%
bound on the ratio was a coin flip (2 of 2 fresh-clone runs failed at +11.6%).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from agreement import Load, pooled_offsets_ms, pooled_ratios, run_rounds

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts" / "engine"
LOAD = Load(requests=60, input_len=1024, output_len=64, rate=3.0)
ROUNDS = 6
BOUND = 0.10
# servekit's TTFT offset over the engine's histogram may exceed vLLM's tool's by this much.
# Measured (benchmarks/README.md): per round, servekit's offset minus vLLM's tool's scatters
# with a standard deviation of 0.5 ms (0.2 ms pooled over six rounds); the pooled difference
# was -0.46 ms (six rounds, 2026-12-01), -0.1 and -0.5 ms (four rounds each, 2026-11-30).
# The margin is the largest seen plus four standard errors (-0.1 + 0.8), rounded up: 1 ms.
MARGIN_MS = 1.0


def test_throughput_and_ttft_offset_agree_with_vllm_bench_serve(
    vllm_measured: Any, target_model: Path, tmp_path: Path
) -> None:
    """Output throughput within 10% of vLLM's own tool pooled over rounds, and servekit's
    TTFT no further above the engine's own histogram than vLLM's tool's is (plus a margin
    sized from the measured spread of that offset)."""
    pin = ["taskset", "-c", "0"]
    rounds = run_rounds(vllm_measured.url, target_model, "tiny-m3", LOAD, ROUNDS, tmp_path, pin)
    tput, ttft = pooled_ratios(rounds)
    ours, theirs = pooled_offsets_ms(rounds)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "bench-agreement.json").write_text(json.dumps({
        "load": asdict(LOAD), "rounds": [asdict(r) for r in rounds],
        "pooled_ratio_throughput": tput, "pooled_ratio_ttft": ttft,
        "pooled_offset_ms_servekit": ours, "pooled_offset_ms_vllm": theirs,
    }, indent=2))  # fmt: skip
    assert all(r.prompt_tokens > 900 for r in rounds)
    assert abs(tput - 1) <= BOUND, rounds
    # A client sees the first token after the engine made it: both offsets are positive.
    assert ours > 0, rounds
    assert theirs > 0, rounds
    assert ours <= theirs + MARGIN_MS, (ours, theirs, rounds)
