"""Benchmark: held-out fidelity of the simulator against the real engine (issue #16, not a test).

The protocol, on vLLM CPU serving the engine tier's tiny model (tests/engine/tiny_model.py):

1. start the server as the tier does (tests/engine/conftest.py `start_vllm`: the API server,
   engine core and OpenMP thread pinned to core 1, VLLM_CPU_KVCACHE_SPACE=1 GiB) with prefix
   caching off, plain or with draft-model speculation (the target as its own draft, k=3);
2. measure each load point with `servekit bench` pinned to core 0, one run directory per point
   and round: closed loops at concurrency 1, 2, 4, 8, 16 and two open-loop Poisson rates, fixed
   lengths (INPUT_LEN in, OUTPUT_LEN out, ignore_eos);
3. measure the server's core itself (benchmarks/measure_cpu_host.py: its read bandwidth and
   best float32 matmul rate, pinned there, a few seconds) and model the engine on that core,
   not on the catalog's `cpu-host` entry, which describes the machine the tier first ran on;
4. fit the step-time coefficients on concurrency 1 and 4 only, predict every point with the
   fitted simulator through `servekit.sim.offline.run_point` and report predicted against
   measured, fit points and held-out points side by side, pooled over rounds with the spread.

Run:
  .venv/bin/python benchmarks/sim_fidelity.py collect OUT [--variant plain|spec] [--rounds N]
  .venv/bin/python benchmarks/sim_fidelity.py report OUT
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from servekit.bench.run_points import read_runs
from servekit.bench.store import read_records
from servekit.hardware import lookup_gpu
from servekit.profiles import load_profile
from servekit.profiles.schema import Profile
from servekit.sim.build import build_engine, profile_sim_model
from servekit.sim.calibrate import (
    FIGURES,
    Calibration,
    Figures,
    acceptance_params,
    calibrate,
    figures,
)
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.specs import GpuSpec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "engine"))
from conftest import (  # noqa: E402
    CLIENT_CORE,
    MEASURED_FLAGS,
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
# The server flags of both variants are the tier's timing flags (prefix caching off: the
# fitted step model is to be judged on compute, not on cache luck).
SERVER_FLAGS = MEASURED_FLAGS


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


def measure_host(core: int, repeats: int = 5) -> dict[str, object]:
    """benchmarks/measure_cpu_host.py's figures of `core`, run pinned there with one thread
    (as vLLM CPU's worker runs), as its --json object."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    script = ROOT / "benchmarks" / "measure_cpu_host.py"
    cmd = [TASKSET, "-c", str(core), sys.executable, str(script), "--repeats", str(repeats),
           "--json"]  # fmt: skip
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    host: dict[str, object] = json.loads(done.stdout)
    return host


def host_gpu(profile: Profile, host: dict[str, object]) -> GpuSpec:
    """The profile's catalog entry with the measured core's figures: bandwidth the best read
    rate, compute the best float32 matmul rate (the core's attainable dense peak; the
    catalog's field is named for bf16 because GPUs are, the tier serves float32)."""
    entry = lookup_gpu(profile.hardware.gpu)
    read, matmul = host["read_gb_s"], host["matmul_gflop_s"]
    assert isinstance(read, float)
    assert isinstance(matmul, float)
    where = f"{host.get('cpu_model') or 'this host'} core {host.get('affinity')}"
    source = f"measured on {where} by benchmarks/measure_cpu_host.py"
    return replace(entry, hbm_gb_s=read, bf16_dense_tflops=matmul / 1e3, sources=(source,))


def bench_point(url: str, point: Point, out: Path, seed: int, nice: int = 0) -> dict[str, object]:
    """Run servekit bench for one point into `out` (pinned to the client core)."""
    cmd = [
        *(["nice", "-n", str(nice)] if nice else []),
        TASKSET, "-c", str(CLIENT_CORE), sys.executable, "-m", "servekit", "bench",
        "--url", url, *point.bench_args(), "--requests-per-point", str(point.requests),
        "--warmup", str(WARMUP), "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
        "--seed", str(seed), "--out", str(out), "--force", "--json",
    ]  # fmt: skip
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    summary: dict[str, object] = json.loads(done.stdout)["points"][0]
    return summary


def collect(out: Path, variant: str, rounds: int, labels: list[str] | None, nice: int) -> None:
    """Start the variant's server, measure every point for `rounds` rounds, stop it.

    With `nice` (negative: needs root), the server's process group and the clients run at
    that niceness: on a machine shared with other jobs, they then lose their cores less.
    """
    target = build_model("target")
    host = measure_host(SERVER_CORE)
    server = start_vllm(f"fidelity-{variant}", target, server_extra(variant, target),
                        core=SERVER_CORE)  # fmt: skip
    if nice:
        os.setpriority(os.PRIO_PGRP, server.proc.pid, nice)
    base = out / variant
    base.mkdir(parents=True, exist_ok=True)
    try:
        meta = {"variant": variant, "model_dir": str(target), "start_s": server.start_s,
                "input_len": INPUT_LEN, "output_len": OUTPUT_LEN, "warmup": WARMUP,
                "server_flags": server_extra(variant, target), "nice": nice,
                "host": host}  # fmt: skip
        (base / "server.json").write_text(json.dumps(meta, indent=2) + "\n")
        for r in range(rounds):
            for point in POINTS[variant]:
                if labels and point.label not in labels:
                    continue
                t0 = time.monotonic()
                s = bench_point(server.url, point, base / point.label / f"r{r}", SEED + r, nice)
                print(f"{variant} {point.label} round {r}: {s['output_throughput_tok_s']:.1f} "
                      f"tok/s, {time.monotonic() - t0:.1f} s", flush=True)  # fmt: skip
    finally:
        stop_vllm(server)
        shutil.copy(server.log, base / "server.log")


# ---------------------------------------------------------------------------------------------
# Report: fit on the training points, predict every point, compare.

HEADERS = {"output_tok_s": "output tok/s", "latency_mean_s": "mean latency s",
           "latency_p90_s": "p90 latency s", "ttft_mean_ms": "mean TTFT ms",
           "itl_mean_ms": "mean ITL ms"}  # fmt: skip
PROFILES = ROOT / "benchmarks" / "profiles"
PROFILE = {"plain": PROFILES / "tiny-llama-cpu.yaml", "spec": PROFILES / "tiny-llama-cpu-spec.yaml"}
KV_CACHE_BYTES = 1 << 30  # VLLM_CPU_KVCACHE_SPACE=1 (GiB), as the tier sets it
FLOAT32_OVER_PLANNED = 2  # the planner plans the float32 checkpoint's KV in bf16 (section 8)
SIM_SEEDS = 16  # open-loop predictions: the mean over this many simulated arrival draws


def run_dirs(base: Path, label: str) -> list[Path]:
    """Every round's run directory of a point (`base/label/r*`), by round."""
    done = [d for d in (base / label).glob("r*") if (d / "summary.json").is_file()]
    return sorted(done, key=lambda d: int(d.name[1:]))


def kv_blocks(profile: Profile, gpu: GpuSpec) -> int:
    """The KV pool vLLM CPU allocates: VLLM_CPU_KVCACHE_SPACE bytes in blocks of the profile's
    size (the planner sizes a GPU pool from device memory; on CPU the pool is this fixed
    space: 262,144 tokens in the server's log for the tiny model)."""
    model = profile_sim_model(profile, gpu=gpu)
    per_token = model.kv_bytes_per_token * FLOAT32_OVER_PLANNED
    return int(KV_CACHE_BYTES // (model.block_size * per_token))


@dataclass(frozen=True, slots=True)
class Fitted:
    """The calibration of one variant: the simulator's coefficients and acceptance."""

    profile: Profile
    gpu: GpuSpec
    step: StepTimeParams
    acceptance: AcceptanceParams | None
    calibration: Calibration


def fit(
    variant: str, base: Path, host: dict[str, object], labels: tuple[str, ...] = TRAIN
) -> Fitted:
    """Calibrate the variant's profile on every round of the training points (step-level fit,
    servekit.sim.calibrate), on the core as `host` measured it (`measure_host`)."""
    profile = load_profile(str(PROFILE[variant]), extra_dirs=[PROFILES])
    gpu = host_gpu(profile, host)
    training, _ = read_runs([d for label in labels for d in run_dirs(base, label)])
    cal = calibrate(profile, training, gpu=gpu)
    return Fitted(profile, gpu, cal.steps.params, acceptance_params(cal.acceptance), cal)


def predict(fitted: Fitted, point: Point, input_len: int) -> Figures:
    """The fitted simulator's figures for a point through the offline path (open loops: the
    mean over SIM_SEEDS arrival draws, the expectation the measured rounds estimate)."""
    load = LoadPoint(point.label, point.requests, input_len, OUTPUT_LEN,
                     concurrency=point.concurrency, rate_rps=point.rate_rps)  # fmt: skip
    seeds = range(SIM_SEEDS if point.rate_rps is not None else 1)
    blocks = kv_blocks(fitted.profile, fitted.gpu)
    runs = []
    for seed in seeds:
        engine = build_engine(fitted.profile, seed=seed, num_gpu_blocks=blocks,
                              step_params=fitted.step, acceptance=fitted.acceptance,
                              gpu=fitted.gpu)  # fmt: skip
        runs.append(figures(run_point(engine, load, random.Random(seed)).records))
    return Figures(*(statistics.fmean(getattr(r, k) for r in runs) for k in FIGURES))


@dataclass(frozen=True, slots=True)
class Row:
    """One point: every round's measured figures and the prediction."""

    point: Point
    held_out: bool
    rounds: tuple[Figures, ...]
    predicted: Figures

    def pooled(self, name: str) -> float:
        """The figure pooled over rounds: the mean, but for throughput the harmonic mean
        (every round serves the same tokens, so that is all tokens over all time; a mean of
        rates would weigh a fast round more than the time it took)."""
        values = [getattr(r, name) for r in self.rounds]
        if name == "output_tok_s":
            return statistics.harmonic_mean(values)
        return statistics.fmean(values)

    def error(self, name: str) -> float:
        """Predicted / pooled measured - 1."""
        return getattr(self.predicted, name) / self.pooled(name) - 1

    def round_errors(self, name: str) -> list[float]:
        """Predicted / measured - 1 of each round."""
        return [getattr(self.predicted, name) / getattr(r, name) - 1 for r in self.rounds]


def compare(
    variant: str, base: Path, host: dict[str, object], points: tuple[Point, ...] | None = None
) -> tuple[Fitted, list[Row]]:
    """Fit on TRAIN and predict every measured point of the variant (`points`: the points as
    measured, by default the variant's POINTS) on the core `host` measured."""
    fitted = fit(variant, base, host)
    rows = []
    for point in points or POINTS[variant]:
        dirs = run_dirs(base, point.label)
        if not dirs:
            continue
        records = [read_records(d) for d in dirs]
        input_len = round(statistics.median(r.prompt_tokens for r in records[0] if r.ok))
        rows.append(Row(point, point.label not in TRAIN, tuple(figures(r) for r in records),
                        predict(fitted, point, input_len)))  # fmt: skip
    return fitted, rows


def report(out: Path, variant: str) -> None:
    """Fit on the training points and print predicted against measured for every point."""
    meta = json.loads((out / variant / "server.json").read_text())
    if "host" not in meta:
        raise SystemExit(f"{out / variant / 'server.json'} has no measured host (collected "
                         "before the host was measured): collect again")  # fmt: skip
    fitted, rows = compare(variant, out / variant, meta["host"])
    steps = fitted.calibration.steps
    print(f"host: {meta['host'].get('cpu_model')}, read {fitted.gpu.hbm_gb_s:.2f} GB/s, "
          f"matmul {fitted.gpu.bf16_dense_tflops * 1e3:.1f} GFLOP/s")  # fmt: skip
    print(f"## {variant}: fitted on {', '.join(TRAIN)} ({steps.observations} step intervals, "
          f"{steps.outliers} dropped as pauses, rms {steps.rms_ms:.2f} ms)")  # fmt: skip
    for e in steps.estimates:
        se = f" +- {e.stderr:.3g}" if e.stderr is not None else ""
        print(f"- {e.name} = {e.value:.4g}{se}" + ("" if e.determined else f" (kept: {e.note})"))
    if steps.admission is not None:
        print(f"- admission_ms = {steps.admission.value:.3g} (fitted, not simulated)")
    if fitted.calibration.acceptance is not None:
        a = fitted.calibration.acceptance
        print(f"- acceptance {a.probabilities} from {a.source}")
    print()
    print(
        "| point | role | rounds | "
        + " | ".join(f"{HEADERS[k]}: measured (round range) / predicted / error" for k in FIGURES)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(FIGURES))
    for row in rows:
        cells = []
        for k in FIGURES:
            errs = row.round_errors(k)
            extra = (
                f" ({getattr(row.predicted, k) - row.pooled(k):+.1f} ms)"
                if k == "ttft_mean_ms"
                else ""
            )
            cells.append(
                f"{row.pooled(k):.4g} / {getattr(row.predicted, k):.4g} / "
                f"{row.error(k):+.1%}{extra} [{min(errs):+.1%}..{max(errs):+.1%}]"
            )
        role = "held out" if row.held_out else "fit"
        print(f"| {row.point.label} | {role} | {len(row.rounds)} | " + " | ".join(cells) + " |")


def main() -> None:
    """Parse the command line and run it."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("out", type=Path)
    c.add_argument("--variant", choices=sorted(POINTS), default="plain")
    c.add_argument("--rounds", type=int, default=1)
    c.add_argument("--points", default="", help="comma-separated labels (default: all)")
    c.add_argument("--nice", type=int, default=0, help="niceness of server and clients")
    r = sub.add_parser("report")
    r.add_argument("out", type=Path)
    r.add_argument("--variant", choices=sorted(POINTS), default="plain")
    args = ap.parse_args()
    if args.cmd == "collect":
        labels = [p for p in args.points.split(",") if p]
        collect(args.out, args.variant, args.rounds, labels, args.nice)
    else:
        report(args.out, args.variant)


if __name__ == "__main__":
    main()
