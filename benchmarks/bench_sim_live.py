"""Benchmark: the live simulator against its own offline run (not a test).

Starts `servekit sim serve` (time scale 1, real time) for the M3 EAGLE3 profile, load-tests
it with `servekit bench` over loopback, and compares output throughput and mean latency with
`servekit sim run`'s offline engine at the same settings: the live server is faithful to the
engine core when they agree within a few percent.

Run: .venv/bin/python benchmarks/bench_sim_live.py [--time-scale 1.0]
"""

from __future__ import annotations

import argparse
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servekit.analyze.summarize import point_metrics
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.summary import run_bench
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


def live(url: str, concurrency: int, requests: int, out: Path) -> tuple[float, float]:
    """Run `servekit bench` (the real load tester) at one concurrency."""
    spec = BenchSpec(
        url, "", "completions", INPUT_LEN, OUTPUT_LEN, TEMPERATURE, requests, warmup=0, seed=3
    )
    summary = run_bench(
        spec, [PointSpec(f"c={concurrency}", concurrency=concurrency)], out, version="bench"
    )
    point = summary.points[0]
    assert point.latency_s.mean is not None
    return point.output_throughput_tok_s, point.latency_s.mean


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
        for concurrency, requests in POINTS:
            with tempfile.TemporaryDirectory() as tmp:
                measured = live(url, concurrency, requests, Path(tmp))
            scale = args.time_scale
            live_fig = (measured[0] * scale, measured[1] / scale)
            sim = offline(concurrency, requests)
            print(
                f"c={concurrency:>3} ({requests} requests): bench {live_fig[0]:7.1f} tok/s "
                f"{live_fig[1]:6.3f} s | sim run {sim[0]:7.1f} tok/s {sim[1]:6.3f} s | "
                f"diff {live_fig[0] / sim[0] - 1:+.1%} tput, "
                f"{live_fig[1] / sim[1] - 1:+.1%} latency",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
