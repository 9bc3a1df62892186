"""Benchmark: held-out fidelity of the simulator against the real engine (issue #16, not a test).

The protocol, on vLLM CPU serving the engine tier's tiny model (tests/engine/tiny_model.py):

1. start the server as the tier does (tests/engine/conftest.py `start_vllm`: the API server,
   engine core and OpenMP thread pinned to core 1, VLLM_CPU_KVCACHE_SPACE=1 GiB) with prefix
   caching off, plain or with draft-model speculation (the target as its own draft, k=3);
2. measure each load point with `servekit bench` pinned to core 0, one run directory per point
   and round: closed loops at concurrency 1, 2, 4, 8, 16 and two open-loop Poisson rates, fixed
   lengths (INPUT_LEN in, OUTPUT_LEN out, ignore_eos);
3. fit the step-time coefficients on concurrency 1 and 4 only, predict every point with the
   fitted simulator through `servekit.sim.offline.run_point` and report predicted against
   measured, fit points and held-out points side by side, pooled over rounds with the spread.

Run:
  .venv/bin/python benchmarks/sim_fidelity.py collect OUT [--variant plain|spec] [--rounds N]
  .venv/bin/python benchmarks/sim_fidelity.py report OUT
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from servekit.analyze.summarize import Distribution, point_metrics
from servekit.bench.store import read_records
from servekit.profiles import load_profile
from servekit.profiles.schema import Profile
from servekit.records import RequestRecord
from servekit.sim.build import build_engine, profile_sim_model
from servekit.sim.offline import LoadPoint, run_point

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "engine"))
from conftest import (  # noqa: E402
    CLIENT_CORE,
    SERVER_CORE,
    build_model,
    spec_config,
    start_vllm,
    stop_vllm,
)

TASKSET = shutil.which("taskset") or "taskset"
INPUT_LEN = 512
OUTPUT_LEN = 64
WARMUP = 2
SEED = 0
# The server flags of both variants: prefix caching off (bench's synthetic prompts from the
# tiny vocabulary share whole 128-token blocks, so hits would depend on the draw, and the
# fitted step model is to be judged on compute, not on cache luck).
SERVER_FLAGS = ["--no-enable-prefix-caching"]


@dataclass(frozen=True, slots=True)
class Point:
    """One load point: a closed-loop concurrency or an open-loop Poisson rate."""

    label: str
    requests: int
    concurrency: int | None = None
    rate_rps: float | None = None

    def bench_args(self) -> list[str]:
        """servekit bench's flags for this point's shape."""
        if self.concurrency is not None:
            return ["--concurrency", str(self.concurrency)]
        return ["--rate", str(self.rate_rps), "--arrival", "poisson", "--max-concurrency", "64"]


TRAIN = ("c1", "c4")
POINTS = {
    "plain": (
        Point("c1", 12, concurrency=1),
        Point("c2", 16, concurrency=2),
        Point("c4", 32, concurrency=4),
        Point("c8", 48, concurrency=8),
        Point("c16", 64, concurrency=16),
        Point("r3", 40, rate_rps=3.0),
        Point("r6", 60, rate_rps=6.0),
    ),
}
POINTS["spec"] = POINTS["plain"]


def server_extra(variant: str, target: Path) -> list[str]:
    """The variant's vLLM flags."""
    if variant == "spec":
        return [*SERVER_FLAGS, *spec_config(target)]
    return list(SERVER_FLAGS)


def bench_point(url: str, point: Point, out: Path, seed: int) -> dict[str, object]:
    """Run servekit bench for one point into `out` (pinned to the client core)."""
    cmd = [
        TASKSET, "-c", str(CLIENT_CORE), sys.executable, "-m", "servekit", "bench",
        "--url", url, *point.bench_args(), "--requests-per-point", str(point.requests),
        "--warmup", str(WARMUP), "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
        "--seed", str(seed), "--out", str(out), "--force", "--json",
    ]  # fmt: skip
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    summary: dict[str, object] = json.loads(done.stdout)["points"][0]
    return summary


def collect(out: Path, variant: str, rounds: int, labels: list[str] | None) -> None:
    """Start the variant's server, measure every point for `rounds` rounds, stop it."""
    target = build_model("target")
    server = start_vllm(f"fidelity-{variant}", target, server_extra(variant, target),
                        core=SERVER_CORE)  # fmt: skip
    base = out / variant
    base.mkdir(parents=True, exist_ok=True)
    try:
        meta = {"variant": variant, "model_dir": str(target), "start_s": server.start_s,
                "input_len": INPUT_LEN, "output_len": OUTPUT_LEN, "warmup": WARMUP,
                "server_flags": server_extra(variant, target)}  # fmt: skip
        (base / "server.json").write_text(json.dumps(meta, indent=2) + "\n")
        for r in range(rounds):
            for point in POINTS[variant]:
                if labels and point.label not in labels:
                    continue
                t0 = time.monotonic()
                s = bench_point(server.url, point, base / point.label / f"r{r}", SEED + r)
                print(f"{variant} {point.label} round {r}: {s['output_throughput_tok_s']:.1f} "
                      f"tok/s, {time.monotonic() - t0:.1f} s", flush=True)  # fmt: skip
    finally:
        stop_vllm(server)
        shutil.copy(server.log, base / "server.log")


# ---------------------------------------------------------------------------------------------
# Report: fit on the training points, predict every point, compare.

METRICS = ("tok_s", "latency_s", "latency_p90_s", "ttft_ms", "itl_ms")
HEADERS = {"tok_s": "output tok/s", "latency_s": "mean latency s", "latency_p90_s":
           "p90 latency s", "ttft_ms": "mean TTFT ms", "itl_ms": "mean ITL ms"}  # fmt: skip
PROFILE = ROOT / "benchmarks" / "profiles" / "tiny-llama-cpu.yaml"
KV_CACHE_BYTES = 1 << 30  # VLLM_CPU_KVCACHE_SPACE=1 (GiB), as the tier sets it
SIM_SEEDS = 16  # open-loop predictions: the mean over this many simulated arrival draws


def figures(records: list[RequestRecord]) -> dict[str, float]:
    """One point's figures, by servekit's own definitions (the same for both sides)."""
    m = point_metrics(records, ci=False)

    def mean(d: Distribution) -> float:
        assert d.mean is not None, "a point without samples"
        return float(d.mean)

    assert m.latency_s.p90 is not None
    return {"tok_s": m.output_throughput_tok_s, "latency_s": mean(m.latency_s),
            "latency_p90_s": float(m.latency_s.p90), "ttft_ms": mean(m.ttft_ms),
            "itl_ms": mean(m.itl_ms)}  # fmt: skip


def measured(base: Path, label: str) -> list[dict[str, float]]:
    """The figures of every measured round of a point (`base/label/r*`)."""
    rounds = sorted((base / label).glob("r*"), key=lambda d: int(d.name[1:]))
    return [figures(read_records(d)) for d in rounds]


def run_dirs(base: Path, labels: tuple[str, ...]) -> list[Path]:
    """Every round's run directory of the given points."""
    return [d for label in labels for d in sorted((base / label).glob("r*"))]


def kv_blocks(profile: Profile) -> int:
    """The KV pool vLLM CPU allocates: VLLM_CPU_KVCACHE_SPACE bytes in blocks of the profile's
    size (the planner sizes a GPU pool from device memory; on CPU the pool is this fixed
    space, so it is given to the simulator directly)."""
    model = profile_sim_model(profile)
    return int(KV_CACHE_BYTES // (model.block_size * model.kv_bytes_per_token))


def predict(profile: Profile, point: Point, input_len: int) -> dict[str, float]:
    """The fitted simulator's figures for a point (open loops: mean over SIM_SEEDS draws)."""
    load = LoadPoint(point.label, point.requests, input_len, OUTPUT_LEN,
                     concurrency=point.concurrency, rate_rps=point.rate_rps)  # fmt: skip
    seeds = range(SIM_SEEDS if point.rate_rps is not None else 1)
    blocks = kv_blocks(profile)
    runs = []
    for seed in seeds:
        engine = build_engine(profile, seed=seed, num_gpu_blocks=blocks)
        runs.append(figures(run_point(engine, load, random.Random(seed)).records))
    return {k: statistics.mean(r[k] for r in runs) for k in METRICS}


def fit_profile(base: Path, workdir: Path) -> Profile:
    """Fit the step-time model on the training points' rounds with `servekit sim fit` and
    return the fitted profile."""
    out = workdir / f"{base.name}-fitted.yaml"
    dirs = [str(d) for d in run_dirs(base, TRAIN)]
    subprocess.run([sys.executable, "-m", "servekit", "sim", "fit", *dirs, "--profile",
                    str(PROFILE), "-o", str(out)], check=True)  # fmt: skip
    return load_profile(str(out), extra_dirs=[PROFILE.parent])


def report(out: Path, variant: str) -> None:
    """Fit on the training points and print predicted against measured for every point."""
    base = out / variant
    with tempfile.TemporaryDirectory() as tmp:
        profile = fit_profile(base, Path(tmp))
    print(f"## {variant}: fitted {profile.simulator.step if profile.simulator else None}")
    print(
        "| point | role | rounds | "
        + " | ".join(f"{HEADERS[k]} measured (spread) | predicted | error" for k in METRICS)
        + " |"
    )
    print("|---|---|---|" + "---|---|---|" * len(METRICS))
    for point in POINTS[variant]:
        rounds = measured(base, point.label)
        if not rounds:
            continue
        input_len = statistics.mode(
            r.prompt_tokens for r in read_records(base / point.label / "r0") if r.prompt_tokens
        )
        sim = predict(profile, point, input_len)
        cells = []
        for k in METRICS:
            values = [r[k] for r in rounds]
            pooled = statistics.mean(values)
            spread = (max(values) - min(values)) / pooled
            err = sim[k] / pooled - 1
            extra = f", {sim[k] - pooled:+.1f} ms" if k == "ttft_ms" else ""
            cells.append(f"{pooled:.4g} (±{spread / 2:.1%}) | {sim[k]:.4g} | {err:+.1%}{extra}")
        role = "fit" if point.label in TRAIN else "held out"
        print(f"| {point.label} | {role} | {len(rounds)} | " + " | ".join(cells) + " |")


def main() -> None:
    """Parse the command line and run it."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("out", type=Path)
    c.add_argument("--variant", choices=sorted(POINTS), default="plain")
    c.add_argument("--rounds", type=int, default=1)
    c.add_argument("--points", default="", help="comma-separated labels (default: all)")
    r = sub.add_parser("report")
    r.add_argument("out", type=Path)
    r.add_argument("--variant", choices=sorted(POINTS), default="plain")
    args = ap.parse_args()
    if args.cmd == "collect":
        collect(args.out, args.variant, args.rounds, [p for p in args.points.split(",") if p])
    else:
        report(args.out, args.variant)


if __name__ == "__main__":
    main()
