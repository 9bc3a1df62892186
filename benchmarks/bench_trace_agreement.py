"""Benchmark: one trace through `sim run` and through `sim serve` + bench (not a test).

Each round writes the trace of `tests/sim/test_trace_agreement.py`, runs it offline
(`servekit sim run --trace`) and live (a fresh `servekit sim serve` at the time scale,
`servekit bench --trace --time-scale` over the completions API, converted to simulated
time), and prints the live figures against the offline ones: output throughput, mean TTFT
(and its difference in wall-clock ms, the client's share of it), and both hit rates. The
spread over rounds is what the test's 5% bound has to cover.

Run: PYTHONPATH=src .venv/bin/python benchmarks/bench_trace_agreement.py [--rounds 5]
     [--time-scale 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "sim"))

from test_trace_agreement import (  # type: ignore[import-not-found]
    PROFILE,
    live_point,
    offline_point,
    write_trace,
)

from servekit.demo import sim_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--time-scale", type=float, default=0.5)
    args = parser.parse_args()
    scale = args.time_scale
    tputs, ttfts = [], []
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trace = write_trace(root / "trace.jsonl")
        offline = offline_point(trace, root / "offline")
        assert offline.ttft_ms.mean is not None
        assert offline.prefix_cache is not None
        print(
            f"offline: {offline.output_throughput_tok_s:.2f} tok/s, mean TTFT "
            f"{offline.ttft_ms.mean:.2f} ms, hit rate {offline.prefix_cache.server_hit_rate} "
            f"(implied {offline.prefix_cache.implied_hit_rate})"
        )
        for index in range(args.rounds):
            started = time.monotonic()
            with sim_server(PROFILE, scale, ()) as url:
                live = live_point(url, trace, root / f"live{index}", scale)
            assert live.ttft_ms.mean is not None
            assert live.prefix_cache is not None
            tput = live.output_throughput_tok_s / offline.output_throughput_tok_s - 1
            ttft = live.ttft_ms.mean / offline.ttft_ms.mean - 1
            wall_ms = (live.ttft_ms.mean - offline.ttft_ms.mean) * scale
            tputs.append(tput)
            ttfts.append(ttft)
            lag = live.schedule.lag_ms.p99 if live.schedule else None
            print(
                f"round {index + 1}: throughput {tput:+.2%}, mean TTFT {ttft:+.2%} "
                f"({wall_ms:+.2f} ms wall), hit rate {live.prefix_cache.server_hit_rate}, "
                f"send lag p99 {lag} ms (sim), {time.monotonic() - started:.1f} s, "
                f"load {os.getloadavg()[0]:.2f}"
            )
    for name, values in (("throughput", tputs), ("mean TTFT", ttfts)):
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        print(
            f"{name}: mean {statistics.fmean(values):+.2%}, sd {sd:.2%}, "
            f"range {min(values):+.2%} .. {max(values):+.2%}"
        )


if __name__ == "__main__":
    main()
