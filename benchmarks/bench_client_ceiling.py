"""Benchmark: output tokens per second one servekit client core drives (not a test).

A fast loopback server (its own process, pinned to the other core when `taskset` exists)
answers every chat request with 256 one-token chunks carrying continuous usage, written in
a handful of writes, so the client, not the server, is the limit. servekit bench runs a
closed loop at concurrency 64 and 256 with its full per-chunk accounting.

Run: .venv/bin/python benchmarks/bench_client_ceiling.py
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servekit.bench.runner import BenchSpec, PointSpec
from servekit.bench.summary import run_bench

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


def main() -> None:
    """Print output tokens/s of servekit bench per concurrency."""
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
        for concurrency in (64, 256):
            with tempfile.TemporaryDirectory() as tmp:
                spec = BenchSpec(
                    f"http://127.0.0.1:{port}", "fast", "chat", 4, 256, 0.0, 2048, warmup=0
                )
                cpu = time.process_time()
                summary, _ = run_bench(
                    spec, [PointSpec(f"c={concurrency}", concurrency=concurrency)],
                    Path(tmp), version="bench",
                )  # fmt: skip
                cpu = time.process_time() - cpu
            point = summary["points"][0]  # type: ignore[index]
            print(
                f"c={concurrency}: {point['output_throughput_tok_s']:,.0f} output tok/s, "
                f"{point['completed']} requests, client CPU {cpu:.1f} s, "
                f"valid={point['client']['valid']}"
            )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
