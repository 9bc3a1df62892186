"""servekit against real vLLM (CPU) with M3's parsers: validate, plan --from-log, bench
side by side with vLLM's own `vllm bench serve`."""

from __future__ import annotations

import json
import re
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
           "--random-output-len", "32", "--num-prompts", "48", "--max-concurrency", "4",
           "--ignore-eos", "--temperature", "0", "--seed", "0", "--save-result",
           "--result-dir", str(out), "--result-filename", "vllm.json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads((out / "vllm.json").read_text(encoding="utf-8")))


def test_bench_agrees_with_vllm_bench_serve(vllm_plain: Any, tmp_path: Path) -> None:
    """The same workload (48 requests, 64 in / 32 out, concurrency 4) measured by servekit
    and by vLLM's own tool: output throughput and mean TTFT within 10%."""
    figures: dict[str, list[float]] = {"servekit": [], "vllm": []}
    for round_ in range(2):  # alternate, so drift on a shared 2-core machine hits both
        code, summary, err = _run(
            "bench", "--url", vllm_plain.url, "--concurrency", "4", "--requests-per-point", "48",
            "--warmup", "2", "--input-len", "64", "--output-len", "32",
            "--out", str(tmp_path / f"sk{round_}"),
        )  # fmt: skip
        assert code == 0, err
        point = summary["points"][0]
        assert point["failed"] == 0
        figures["servekit"] += [point["output_throughput_tok_s"], point["ttft_ms"]["mean"]]
        theirs = _vllm_bench(vllm_plain.url, vllm_plain.model_dir, tmp_path / f"v{round_}")
        figures["vllm"] += [theirs["output_throughput"], theirs["mean_ttft_ms"]]
    ours_tput = (figures["servekit"][0] + figures["servekit"][2]) / 2
    ours_ttft = (figures["servekit"][1] + figures["servekit"][3]) / 2
    their_tput = (figures["vllm"][0] + figures["vllm"][2]) / 2
    their_ttft = (figures["vllm"][1] + figures["vllm"][3]) / 2
    record = {
        "servekit": {"output_tok_s": ours_tput, "mean_ttft_ms": ours_ttft},
        "vllm_bench_serve": {"output_tok_s": their_tput, "mean_ttft_ms": their_ttft},
    }
    (Path(vllm_plain.log).parent / "bench-agreement.json").write_text(json.dumps(record, indent=2))
    assert ours_tput == pytest.approx(their_tput, rel=0.10), record
    assert ours_ttft == pytest.approx(their_ttft, rel=0.10), record
