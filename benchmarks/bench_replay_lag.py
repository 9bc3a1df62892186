"""Benchmark: how closely bench's trace replay keeps a trace's timestamps (not a test).

`servekit sim serve` (llama-3.1-70b-4xh100, real time) runs in its own process, pinned to
core 1 when `taskset` exists; this client is pinned to core 0. Each round replays a
Mooncake-style trace of RATE requests/s for DURATION s (Poisson arrivals, prompts of 1-4
blocks of 64 tokens (16 at least) with half the requests sharing their first blocks, 4-32 output
tokens) through `run_points`, a fresh set of hash ids each round, and prints the
planning rate (requests planned per second, `/tokenize` sizing included) and the
schedule lag of every send (record sent_ns - scheduled_ns: from the trace's timestamp to
the request's last byte written) as p50 / p99 / max, with the sends accounted against
the schedule. Before each round, a bare busy-wait on the same core for 10 s (no event
loop, no I/O) gives the machine's own scheduling noise, the floor any sender sits on.
Then the spread over the rounds.

Run: PYTHONPATH=src .venv/bin/python benchmarks/bench_replay_lag.py [--rounds 3] [--no-spin]
(`--no-spin`: each send after one `asyncio.sleep`, as the open loop slept before.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servekit.analyze.traffic import ScheduleBound, schedule_block
from servekit.bench import loops
from servekit.bench.replay import trace_prompts
from servekit.bench.runner import run_points
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.store import RecordWriter
from servekit.client.endpoint import open_endpoint
from servekit.workload.synthetic import poisson_arrivals
from servekit.workload.traces import Trace, TraceRequest

PROFILE = "llama-3.1-70b-4xh100"
MODEL = "Llama-3.1-70B-Instruct"
BLOCK = 64


def make_trace(rate: float, duration_s: float, round_: int) -> Trace:
    """A Poisson trace with shared leading blocks; ids are fresh for every round."""
    rng = random.Random(round_)
    offsets = [t for t in poisson_arrivals(rate, int(rate * duration_s * 2), rng) if t < duration_s]
    base = offsets[0]
    requests = []
    for i, t in enumerate(offsets):
        blocks = rng.randint(1, 4)
        input_len = (blocks - 1) * BLOCK + rng.randint(16, BLOCK)  # over the chat template
        ns = 1_000_000 * (round_ + 1) + 100 * i
        shared = (ns // 1000 * 1000 + 1, ns // 1000 * 1000 + 2)[: blocks - 1] if i % 2 else ()
        ids = (*shared, *range(ns + 10, ns + 10 + blocks - len(shared)))
        requests.append(TraceRequest(round(t - base, 6), input_len, rng.randint(4, 32), ids, i + 1))
    return Trace("bench", "mooncake", tuple(requests), block_tokens=BLOCK)


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    """`sim serve` on a free port, on core 1 when taskset exists."""
    pin = ["taskset", "-c", "1"] if shutil.which("taskset") else []
    proc = subprocess.Popen(
        [*pin, sys.executable, "-m", "servekit", "sim", "serve", "--profile", PROFILE,
         "--port", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    return proc, str(json.loads(proc.stdout.readline())["url"])


async def planning_rate(url: str, trace: Trace) -> float:
    """Requests planned per second for the trace (its prompts sized with /tokenize)."""
    spec = BenchSpec(url, MODEL, trace=trace)
    async with open_endpoint(url) as endpoint:
        start = time.perf_counter()
        await trace_prompts(endpoint, spec, trace.requests, BLOCK)
        return len(trace.requests) / (time.perf_counter() - start)


def timer_floor(rate: float, duration_s: float) -> float:
    """p99 lateness (ms) of a bare busy-wait for RATE deadlines a second, no event loop, no
    I/O: what the machine's scheduling alone costs any sender on this core right now."""
    late = []
    due = time.monotonic_ns()
    for _ in range(int(rate * duration_s)):
        due += int(1e9 / rate)
        if (ahead := due - time.monotonic_ns() - 2_000_000) > 0:
            time.sleep(ahead / 1e9)
        while time.monotonic_ns() < due:
            pass
        late.append((time.monotonic_ns() - due) / 1e6)
    return sorted(late)[int(len(late) * 0.99)]


def one_round(
    url: str, rate: float, duration_s: float, round_: int, metrics_interval_s: float
) -> dict[str, float]:
    """Replay one trace; its planning rate and schedule-lag figures."""
    floor = timer_floor(rate, 10.0)
    trace = make_trace(rate, duration_s, round_)
    planned_per_s = asyncio.run(planning_rate(url, trace))
    offsets = tuple(r.offset_s for r in trace.requests)
    spec = BenchSpec(
        url, MODEL, trace=trace, max_schedule_lag_ms=5.0, metrics_interval_s=metrics_interval_s
    )
    point = PointSpec("trace", rate_rps=rate, schedule=offsets, requests=len(offsets))
    with tempfile.TemporaryDirectory() as out, RecordWriter(Path(out)) as writer:
        run = asyncio.run(run_points(spec, [point], writer))
    (outcome,) = run.outcomes
    lags = sorted((r.sent_ns - r.scheduled_ns) / 1e6 for r in outcome.records)
    schedule = schedule_block(outcome.records, ScheduleBound(len(offsets), 5.0))
    return {
        "requests": len(offsets),
        "sent": schedule.sent,
        "failed": sum(1 for r in outcome.records if not r.ok),
        "planned_per_s": planned_per_s,
        "p50": statistics.median(lags),
        "p99": schedule.lag_ms.p99 or 0.0,
        "max": lags[-1],
        "task_lag_p99": (outcome.client.send_lag_ms_p99 or 0.0) if outcome.client else 0.0,
        "valid": float(schedule.valid),
        "floor_p99": floor,
    }


def main() -> None:
    """Run the rounds against one server and print each and the spread."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--metrics-interval", type=float, default=0.25)
    parser.add_argument(
        "--no-spin", action="store_true", help="sleep to each send without the final spin"
    )
    args = parser.parse_args()
    if args.no_spin:  # the open loop as it was: one asyncio.sleep to the send time
        loops.SPIN_LEAD_NS = 0
    if hasattr(os, "sched_setaffinity") and shutil.which("taskset"):
        os.sched_setaffinity(0, {0})
    proc, url = start_server()
    rows = []
    try:
        for round_ in range(args.rounds):
            row = one_round(url, args.rate, args.duration, round_, args.metrics_interval)
            rows.append(row)
            print(
                f"round {round_ + 1}: {row['sent']:.0f}/{row['requests']:.0f} sent "
                f"({row['failed']:.0f} failed), planned {row['planned_per_s']:.0f} req/s, "
                f"lag p50 {row['p50']:.3f} / p99 {row['p99']:.3f} / max {row['max']:.3f} ms "
                f"(task start p99 {row['task_lag_p99']:.3f}), valid {bool(row['valid'])}; bare "
                f"busy-wait p99 {row['floor_p99']:.3f} ms, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    for key in ("planned_per_s", "p50", "p99", "max", "floor_p99"):
        values = [row[key] for row in rows]
        print(f"{key}: median {statistics.median(values):.3f}, range {min(values):.3f}-"
              f"{max(values):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
