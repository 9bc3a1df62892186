"""Benchmark: the live simulator against its own offline run (not a test).

Starts `servekit sim serve` for the M3 EAGLE3 profile at a time scale, load-tests it with
`servekit bench` over loopback, converts the figures to simulated time as `servekit demo`
does (`analyze.timescale.to_simulated_time`), and compares output throughput and mean
latency with the offline engine (`servekit sim run`'s `run_point`) at the same settings,
seed and request count. Each round is one bench point on the same server; the spread over
rounds is what `tests/sim/test_live_agreement.py` sizes its bound from.

Run: .venv/bin/python benchmarks/bench_sim_live.py [--time-scale 0.1] [--points 1000:1000]
     [--rounds 10] [--api completions]
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servekit.analyze.summarize import point_metrics
from servekit.analyze.timescale import to_simulated_time
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.summary import run_bench
from servekit.profiles import load_profile
from servekit.sim.build import build_engine
from servekit.sim.offline import LoadPoint, run_point

PROFILE = "minimax-m3-mxfp8-8xa800"
INPUT_LEN, OUTPUT_LEN, TEMPERATURE, SEED = 1024, 128, 0.7, 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def live(
    url: str, api: str, concurrency: int, requests: int, time_scale: float, out: Path
) -> tuple[float, float, list[str]]:
    """One `servekit bench` point, in simulated time: (tok/s, mean latency s, warnings)."""
    spec = BenchSpec(
        url, "", api, INPUT_LEN, OUTPUT_LEN, TEMPERATURE, requests, warmup=0, seed=SEED
    )
    summary = run_bench(
        spec, [PointSpec(f"c={concurrency}", concurrency=concurrency)], out, version="bench"
    )
    point = to_simulated_time(summary, time_scale).points[0]
    assert point.latency_s.mean is not None
    warnings = point.client.warnings if point.client else []
    return point.output_throughput_tok_s, point.latency_s.mean, warnings


def offline(concurrency: int, requests: int) -> tuple[float, float]:
    """The offline engine at the same settings: (tok/s, mean latency s)."""
    point = LoadPoint("x", requests, INPUT_LEN, OUTPUT_LEN, TEMPERATURE, concurrency=concurrency)
    engine = build_engine(load_profile(PROFILE), seed=SEED)
    m = point_metrics(run_point(engine, point, random.Random(SEED)).records)
    assert m.latency_s.mean is not None
    return m.output_throughput_tok_s, m.latency_s.mean


def spread(name: str, values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return (
        f"{name} mean {statistics.fmean(values):+.2%} sd {sd:.2%} "
        f"min {min(values):+.2%} max {max(values):+.2%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--points", default="1000:1000", help="CONCURRENCY:REQUESTS,...")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--api", default="completions", choices=["completions", "chat"])
    args = parser.parse_args()
    points = [tuple(map(int, p.split(":"))) for p in args.points.split(",")]
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "servekit", "sim", "serve", "--profile", PROFILE,
         "--port", str(port), "--time-scale", str(args.time_scale), "--seed", str(SEED)],
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own scheduling group, apart from the load generator
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                time.sleep(0.05)
        for concurrency, requests in points:
            sim = offline(concurrency, requests)
            tput_diffs, latency_diffs = [], []
            for round_ in range(args.rounds):
                with tempfile.TemporaryDirectory() as tmp:
                    tput, latency, warnings = live(
                        url, args.api, concurrency, requests, args.time_scale, Path(tmp)
                    )
                tput_diffs.append(tput / sim[0] - 1)
                latency_diffs.append(latency / sim[1] - 1)
                print(
                    f"c={concurrency:>4} ({requests} requests) round {round_ + 1}: bench "
                    f"{tput:7.1f} tok/s {latency:7.3f} s | sim run {sim[0]:7.1f} tok/s "
                    f"{sim[1]:7.3f} s | diff {tput_diffs[-1]:+.2%} tput, "
                    f"{latency_diffs[-1]:+.2%} latency{' | ' if warnings else ''}"
                    f"{'; '.join(warnings)}",
                    flush=True,
                )
            if args.rounds > 1:
                print(f"c={concurrency}: {spread('tput', tput_diffs)}; "
                      f"{spread('latency', latency_diffs)}", flush=True)  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
