"""servekit against real vLLM (CPU) with M3's parsers: validate, plan --from-log, bench
side by side with vLLM's own `vllm bench serve`."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

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
        "validate", "--url", vllm_plain.url, "--thinking-kwargs", '{"thinking_mode": "enabled"}',
        "--log", str(vllm_plain.log), "--out", str(tmp_path),
    )  # fmt: skip
    statuses = {c["name"]: (c["status"], c["detail"]) for c in doc["checks"]}
    assert code == 0, statuses
    for name in ("health", "models", "chat", "reasoning", "tool_calls", "long_context",
                 "context_overflow", "ladder"):  # fmt: skip
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


def _vllm_bench(url: str, tokenizer: Path, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url", url,
           "--endpoint", "/v1/chat/completions", "--model", "tiny-m3", "--tokenizer",
           str(tokenizer), "--dataset-name", "random", "--random-input-len", "64",
           "--random-output-len", "32", "--num-prompts", str(REQUESTS), "--max-concurrency",
           "4", "--ignore-eos", "--temperature", "0", "--seed", "0", "--save-result",
           "--result-dir", str(out), "--result-filename", "vllm.json"]  # fmt: skip
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", str(CLIENT_CORE), *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads((out / "vllm.json").read_text(encoding="utf-8")))


def _servekit_bench(url: str, out: Path) -> dict[str, Any]:
    """servekit bench as its own process on the client core, as vLLM's tool runs."""
    cmd = [sys.executable, "-m", "servekit", "bench", "--url", url, "--concurrency", "4",
           "--requests-per-point", str(REQUESTS), "--warmup", "4", "--input-len", "64",
           "--output-len", "32", "--out", str(out), "--json"]  # fmt: skip
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", str(CLIENT_CORE), *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout)["points"][0])


REQUESTS = 200
ROUNDS = 5
CLIENT_CORE = 0  # the engine fixtures pin the server to core 1


def test_bench_agrees_with_vllm_bench_serve(vllm_plain: Any, tmp_path: Path) -> None:
    """The same workload (200 requests, 64 in / 32 out, concurrency 4) measured by servekit
    and by vLLM's own tool, alternating five times, each as its own process on core 0 with
    the server on core 1: the medians of output throughput and mean TTFT agree within 10%."""
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    for round_ in range(ROUNDS):
        point = _servekit_bench(vllm_plain.url, tmp_path / f"sk{round_}")
        assert point["failed"] == 0
        ours.append((point["output_throughput_tok_s"], point["ttft_ms"]["mean"]))
        result = _vllm_bench(vllm_plain.url, vllm_plain.model_dir, tmp_path / f"v{round_}")
        theirs.append((result["output_throughput"], result["mean_ttft_ms"]))
    record = {
        "servekit": {"output_tok_s": [t for t, _ in ours], "mean_ttft_ms": [f for _, f in ours]},
        "vllm_bench_serve": {"output_tok_s": [t for t, _ in theirs],
                             "mean_ttft_ms": [f for _, f in theirs]},
    }  # fmt: skip
    (vllm_plain.log.parent / "bench-agreement.json").write_text(json.dumps(record, indent=2))
    tput = statistics.median(t for t, _ in ours), statistics.median(t for t, _ in theirs)
    ttft = statistics.median(f for _, f in ours), statistics.median(f for _, f in theirs)
    assert tput[0] == pytest.approx(tput[1], rel=0.10), record
    assert ttft[0] == pytest.approx(ttft[1], rel=0.10), record
