"""servekit against real vLLM (CPU) with M3's parsers: validate, plan --from-log, bench
side by side with vLLM's own `vllm bench serve`."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.bench.scrape import parse_metrics
from servekit.bench.store import read_records
from servekit.cli.main import cli

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]
VLLM_BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


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


def _vllm_bench(url: str, tokenizer: Path, out: Path, seed: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-c",
        VLLM_BENCH,
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "tiny-m3",
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        "64",
        "--random-output-len",
        "32",
        "--num-prompts",
        str(REQUESTS),
        "--max-concurrency",
        str(CONCURRENCY),
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        str(seed),
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        "vllm.json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads((out / "vllm.json").read_text(encoding="utf-8")))


def _prompt_tokens(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:  # noqa: S310 - loopback
        return parse_metrics(resp.read().decode()).counters["vllm:prompt_tokens"]


def _servekit_bench(url: str, out: Path, seed: int, input_len: int) -> dict[str, Any]:
    """servekit bench as its own process, as vLLM's tool runs."""
    cmd = [
        sys.executable,
        "-m",
        "servekit",
        "bench",
        "--url",
        url,
        "--concurrency",
        str(CONCURRENCY),
        "--requests-per-point",
        str(REQUESTS),
        "--warmup",
        "4",
        "--input-len",
        str(input_len),
        "--output-len",
        "32",
        "--seed",
        str(seed),
        "--metrics-interval",
        "0",
        "--out",
        str(out),
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout)["points"][0])


REQUESTS = 100
CONCURRENCY = 4
# The server alone moves by up to +-25% between identical runs on this 2-core machine (its
# API server, engine core and worker share the cores with the client), so the suite checks
# agreement within 25%: that catches a mis-measuring client (a min_tokens logits processor
# alone cost ~20% here). benchmarks/README.md records the medians of longer alternations.
TOLERANCE = 0.25
ROUNDS = 6


def test_bench_agrees_with_vllm_bench_serve(vllm_plain: Any, tmp_path: Path) -> None:
    """The same workload (100 requests, the prompt length the server counts for vLLM's
    tool, 32 tokens out, concurrency 4) measured by servekit and by vLLM's own tool, each as
    its own process, alternating six times with a new prompt seed per round: the medians of
    the per-round ratios of output throughput is within 25% of 1; mean TTFT is recorded.

    The server alone varies by up to +-25% between identical runs on this shared 2-core
    machine, so single runs cannot be compared; servekit's /metrics sampling is off here
    because vLLM's tool does not load the server with it. TTFT is compared from the moment
    the client starts the request, which is where vLLM's tool starts its clock; servekit's
    own TTFT starts when the request's bytes have left (DESIGN.md section 5), so it is lower
    by the client's own send overhead, which the record keeps as ttft_from_send_vs_vllm.
    """
    rounds = []
    for round_ in range(ROUNDS):
        before = _prompt_tokens(vllm_plain.url)
        theirs = _vllm_bench(vllm_plain.url, vllm_plain.model_dir, tmp_path / f"v{round_}", round_)
        # vLLM's tool sizes the raw prompt; the server also counts the chat template. Give
        # servekit the prompt length the server saw (one extra request: vLLM's test request).
        seen = round((_prompt_tokens(vllm_plain.url) - before) / (REQUESTS + 1))
        ours = _servekit_bench(vllm_plain.url, tmp_path / f"sk{round_}", round_, seen)
        assert ours["failed"] == 0
        records = read_records(tmp_path / f"sk{round_}")
        from_call = statistics.mean((r.first_token_ns or 0) - r.scheduled_ns for r in records)
        rounds.append(
            {
                "prompt_tokens": seen,
                "servekit": {
                    "output_tok_s": ours["output_throughput_tok_s"],
                    "mean_ttft_ms": from_call / 1e6,
                    "mean_ttft_from_send_ms": ours["ttft_ms"]["mean"],
                },
                "vllm_bench_serve": {
                    "output_tok_s": theirs["output_throughput"],
                    "mean_ttft_ms": theirs["mean_ttft_ms"],
                },
            }
        )
    ratios = {
        key: statistics.median(r["servekit"][key] / r["vllm_bench_serve"][key] for r in rounds)
        for key in ("output_tok_s", "mean_ttft_ms")
    }
    ratios["ttft_from_send_vs_vllm"] = statistics.median(
        r["servekit"]["mean_ttft_from_send_ms"] / r["vllm_bench_serve"]["mean_ttft_ms"]
        for r in rounds
    )
    record = {"rounds": rounds, "median_ratio": ratios}
    (vllm_plain.log.parent / "bench-agreement.json").write_text(json.dumps(record, indent=2))
    assert ratios["output_tok_s"] == pytest.approx(1.0, abs=TOLERANCE), record
    # Mean TTFT at concurrency 4 depends on when the busy 2-core server picks each request
    # up: across CI runs its median ratio ranged 0.89-1.82, so it is recorded, not asserted
    # (benchmarks/README.md).
    assert all(r["servekit"]["mean_ttft_ms"] > 0 for r in rounds), record
