"""Benchmark: the live simulator against its own offline run (not a test).

Starts `servekit sim serve` (time scale 1, real time) for the M3 EAGLE3 profile, drives it
with a small closed-loop streaming client over loopback, and compares output throughput and
mean latency with `servekit sim run` at the same settings. The live server is faithful to
the engine core when they agree within a few percent.

Run: .venv/bin/python benchmarks/bench_sim_live.py [--time-scale 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import subprocess
import sys
import time

import aiohttp

from servekit.analyze.summarize import point_metrics
from servekit.profiles import load_profile
from servekit.sim.build import build_engine
from servekit.sim.offline import LoadPoint, run_point

PROFILE = "minimax-m3-mxfp8-8xa800"
POINTS = [(1, 12), (4, 32), (16, 64), (128, 256)]
INPUT_LEN, OUTPUT_LEN, TEMPERATURE = 1024, 128, 0.7


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def one(session: aiohttp.ClientSession, url: str, prompt: str) -> tuple[float, int]:
    body = {
        "model": "MiniMax-M3-MXFP8",
        "prompt": prompt,
        "max_tokens": OUTPUT_LEN,
        "temperature": TEMPERATURE,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    tokens = 0
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    tokens = usage["completion_tokens"]
    return time.perf_counter() - start, tokens


async def closed_loop(
    url: str, prompt: str, concurrency: int, requests: int, scale: float
) -> tuple[float, float]:
    latencies: list[float] = []
    total = 0
    remaining = requests
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker() -> None:
            nonlocal remaining, total
            while remaining > 0:
                remaining -= 1
                latency, tokens = await one(session, url, prompt)
                latencies.append(latency / scale)
                total += tokens

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        window = (time.perf_counter() - start) / scale
    return total / window, sum(latencies) / len(latencies)


def offline(concurrency: int, requests: int) -> tuple[float, float]:
    profile = load_profile(PROFILE)
    point = LoadPoint("x", requests, INPUT_LEN, OUTPUT_LEN, TEMPERATURE, concurrency=concurrency)
    m = point_metrics(run_point(build_engine(profile, seed=3), point, random.Random(3)).records)
    assert m.latency_s.mean is not None
    return m.output_throughput_tok_s, m.latency_s.mean


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-scale", type=float, default=1.0)
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "servekit", "sim", "serve", "--profile", PROFILE,
         "--port", str(port), "--time-scale", str(args.time_scale), "--seed", "3"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                time.sleep(0.05)
        prompt = " ".join(f"w{i}" for i in range(INPUT_LEN))
        for concurrency, requests in POINTS:
            live = asyncio.run(closed_loop(url, prompt, concurrency, requests, args.time_scale))
            sim = offline(concurrency, requests)
            print(
                f"c={concurrency:>3} ({requests} requests): live {live[0]:7.1f} tok/s "
                f"{live[1]:6.3f} s | offline {sim[0]:7.1f} tok/s {sim[1]:6.3f} s | "
                f"diff {live[0] / sim[0] - 1:+.1%} tput, {live[1] / sim[1] - 1:+.1%} latency",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
