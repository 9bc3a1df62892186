"""`servekit demo`: the deployment's whole journey on the built-in simulator (shell).

plan and render the MiniMax-M3 profile -> start the simulator with EAGLE3 -> validate ->
sweep concurrency at temperature 0.7 and 0.0 -> restart without EAGLE3 -> sweep again ->
compare -> report. The live simulator runs faster than real time (`--time-scale`); every
figure the demo prints is converted back to simulated time (analyze.timescale) and says so.
Every process the demo starts is stopped when it ends, also on errors and Ctrl-C. Output
goes to `--out` (out/demo); a second demo there replaces the first one's output, which it
recognises by the marker file it writes, and it refuses any other non-empty directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from servekit import __version__
from servekit.analyze.compare import compare_runs, highest_meeting, speculation_facts
from servekit.analyze.timescale import to_simulated_time
from servekit.bench.spec import BenchSpec, bench_points, bench_spec
from servekit.bench.store import write_summary, write_summary_tables
from servekit.bench.summary import run_bench
from servekit.errors import ChecksFailed, ServekitError, SimulationError
from servekit.hardware import lookup_gpu
from servekit.plan import make_plan, plan_inputs
from servekit.profiles import Profile, load_profile
from servekit.reference import REFERENCE_PROFILE, SEED_TABLE, is_fitted
from servekit.render.targets import render
from servekit.report.build import write_report
from servekit.results.demo import DEMO_VERSION, DemoDocument, PerStreamReach
from servekit.results.summary import Summary
from servekit.validate.context import ValidateSpec
from servekit.validate.runner import CheckResult, run_validate
from servekit.workload.datasets import LengthSpec
from servekit.workload.load import Level, Load

PROFILE = REFERENCE_PROFILE
NO_EAGLE3 = f"{PROFILE}-no-eagle3"
MARKER = ".servekit-demo"  # marks a directory as the demo's own output
ENTRIES = ("launch", "validate", "eagle3-t0.7", "eagle3-t0.0", "no-eagle3-t0.7", "report")


def prepare_out(out: Path) -> None:
    """Make `out` ready for a demo, before any work starts.

    A new or empty directory becomes the demo's (it gets the marker file). One that holds
    the marker has the demo's previous output removed: only the entries the demo writes
    (`ENTRIES`), never anything else in it. Any other non-empty directory is refused.

    Raises:
        ServekitError: `out` is a file, a non-empty directory the demo did not write, or
            cannot be written.
    """
    fix = "pass --out with a new or empty directory"
    try:
        if out.exists() and not out.is_dir():
            raise ServekitError(f"demo --out {out} is not a directory", fix=fix)
        if out.is_dir() and any(out.iterdir()):
            if not (out / MARKER).is_file():
                raise ServekitError(
                    f"demo --out {out} is not empty and holds no {MARKER} marker (servekit "
                    "demo did not write it); it is left alone",
                    fix=fix,
                )
            for name in ENTRIES:
                path = out / name
                if path.is_symlink() or path.is_file():
                    path.unlink()
                elif path.is_dir():
                    shutil.rmtree(path)
        out.mkdir(parents=True, exist_ok=True)
        (out / MARKER).write_text(
            "written by servekit demo; the next demo into this directory replaces its output\n",
            encoding="utf-8",
        )
    except OSError as exc:
        raise ServekitError(f"cannot write demo output in {out}: {exc.strerror}", fix=fix) from None


@dataclass(frozen=True, slots=True)
class DemoPlan:
    """How big the demo is: concurrency levels, requests per level, simulator speed."""

    concurrency: tuple[int, ...]
    cold_concurrency: tuple[int, ...]  # the temperature 0.0 sweep (per-stream target)
    min_requests: int
    time_scale: float

    def requests(self, concurrency: int) -> int:
        """Requests at one level: two rounds of the concurrency, at least `min_requests`."""
        return max(2 * concurrency, self.min_requests)


FULL = DemoPlan((1, 2, 3, 4, 8, 16, 128), (1, 2, 3, 4), 16, 0.1)
QUICK = DemoPlan((1, 4, 8, 16, 128), (2, 3, 4), 16, 0.1)


@contextmanager
def sim_server(profile: str, time_scale: float, faults: tuple[str, ...]) -> Iterator[str]:
    """Run `servekit sim serve` on a free loopback port; yield its URL; always stop it."""
    cmd = [
        sys.executable,
        "-m",
        "servekit",
        "sim",
        "serve",
        "--profile",
        profile,
        "--port",
        "0",
        "--time-scale",
        str(time_scale),
        "--json",
    ]
    for fault in faults:
        cmd += ["--fault", fault]
    # A session of its own: with the kernel's autogroup scheduling (most Linux desktops and
    # servers) a session shares one CPU share, so on a busy machine the simulator would
    # compete with the load generator inside it and fall behind its time-scaled clock.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        try:
            url = str(json.loads(line)["url"])
        except (ValueError, KeyError):
            raise SimulationError(
                f"the simulator for {profile} did not start",
                fix=f"run servekit sim serve --profile {profile} to see its error",
            ) from None
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def plan_lines(profile: Profile) -> list[str]:
    """The memory plan in two lines."""
    plan = make_plan(plan_inputs(profile, lookup_gpu(profile.hardware.gpu)))
    gib = 2**30
    return [
        f"plan: per GPU {plan.weights.total_bytes / gib:.1f} GiB weights, "
        f"{plan.kv_cache_bytes / gib:.1f} GiB KV cache = {plan.kv_cache_tokens:,} tokens, "
        f"{plan.max_concurrency:.2f} requests at max_model_len "
        f"{profile.serve_args.max_model_len}; fits: {plan.fits}",
    ]


def demo_load(
    profile: Profile, levels: tuple[int, ...], temperature: float, demo: DemoPlan
) -> Load:
    """The demo's traffic: the profile's bench lengths at each concurrency, seed 7."""
    bench = profile.bench_defaults
    return Load(
        input_len=LengthSpec(bench.input_len),
        output_len=LengthSpec(bench.output_len),
        temperature=temperature,
        seed=7,
        requests_per_point=demo.min_requests,
        levels=tuple(Level(concurrency=c, requests=demo.requests(c)) for c in levels),
    )


def sweep(
    url: str,
    profile: Profile,
    levels: tuple[int, ...],
    temperature: float,
    out: Path,
    demo: DemoPlan,
) -> Summary:
    """One closed-loop sweep, written to `out` in simulated time."""
    load = demo_load(profile, levels, temperature, demo)
    target = BenchSpec(
        base_url=url, model=profile.serve_args.served_model_name or profile.model.path, warmup=2
    )
    spec, points = bench_spec(load, target), bench_points(load)
    # failed requests (an injected --fault) are the demo's subject, shown in its report
    summary = run_bench(
        spec, points, out, version=__version__, profile=profile.name, max_failure_rate=1.0
    )
    simulated = to_simulated_time(summary, demo.time_scale)
    write_summary(out, simulated)
    write_summary_tables(out, simulated)
    return simulated


def deployment_table(run: Summary) -> list[str]:
    """The deployment's table (concurrency, tok/s, mean latency) beside its figures, each
    row labelled as fitted (the calibration saw it) or held out (a prediction)."""
    by_c = {p.concurrency: p for p in run.points}
    lines = [
        "concurrency | calibration | throughput tok/s (deployment) | "
        "mean latency s (deployment) | diff"
    ]
    for row in SEED_TABLE:
        c, tput, lat = row.concurrency, row.output_throughput_tok_s, row.avg_latency_s
        p = by_c.get(c)
        if p is None or p.latency_s.mean is None:
            continue
        ours_t, ours_l = p.output_throughput_tok_s, p.latency_s.mean
        dt, dl = (ours_t / tput - 1) * 100, (ours_l / lat - 1) * 100
        label = "fitted" if is_fitted(c) else "held out"
        lines.append(
            f"{c:>11} | {label:<11} | {ours_t:7.1f} ({tput:6.1f}) | {ours_l:6.2f} ({lat:5.2f}) | "
            f"{dt:+5.1f}% tok/s, {dl:+5.1f}% latency"
        )
    return lines


def run_demo(
    out: Path,
    *,
    quick: bool = False,
    faults: tuple[str, ...] = (),
    say: Callable[[str], None] = print,
) -> DemoDocument:
    """The whole journey; returns what it found. Raises ChecksFailed when validate fails."""
    demo = QUICK if quick else FULL
    started = time.monotonic()
    on, off = load_profile(PROFILE), load_profile(NO_EAGLE3)
    prepare_out(out)
    say(f"output: {out} (the next demo into it replaces it)")
    for line in plan_lines(on):
        say(line)
    launch = out / "launch"
    launch.mkdir(exist_ok=True)
    for target, name in (
        ("vllm", "vllm-serve.sh"),
        ("compose", "compose.yaml"),
        ("k8s", "k8s.yaml"),
    ):
        (launch / name).write_text(render(on, target), encoding="utf-8")
    say(f"render: launch artifacts in {launch}")
    with sim_server(PROFILE, demo.time_scale, faults) as url:
        say(f"simulator (EAGLE3) at {url}, {1 / demo.time_scale:g}x real time")
        spec = ValidateSpec(
            base_url=url,
            model=on.serve_args.served_model_name,
            expected_max_model_len=on.serve_args.max_model_len,
            thinking_kwargs=on.validate_defaults.thinking_kwargs,
            thinking_expected=True,
            ladder=tuple(on.validate_defaults.ladder),
            check_timeout_s=60.0,
        )
        results: list[CheckResult] = []
        doc = run_validate(spec, out=out / "validate", on_result=results.append)
        for r in results:
            say(f"validate {r.status:>4}  {r.name}: {r.detail}")
        if not doc.passed:
            failed = [r for r in results if r.status == "fail"]
            raise ChecksFailed(
                f"validate failed ({', '.join(r.name for r in failed)}): "
                f"{failed[0].detail}; stopping before load testing",
                fix="fix the failed check (its known issue is named above), then run again",
            )
        say(f"sweep EAGLE3 on, temperature 0.7: concurrency {','.join(map(str, demo.concurrency))}")
        warm = sweep(url, on, demo.concurrency, 0.7, out / "eagle3-t0.7", demo)
        say("sweep EAGLE3 on, temperature 0.0 (per-stream target)")
        cold = sweep(url, on, demo.cold_concurrency, 0.0, out / "eagle3-t0.0", demo)
    with sim_server(NO_EAGLE3, demo.time_scale, ()) as url:
        say(f"simulator restarted without EAGLE3 at {url}; sweep at temperature 0.7")
        plain = sweep(url, off, demo.concurrency, 0.7, out / "no-eagle3-t0.7", demo)
    name, max_batch, k = speculation_facts([on, off])
    comparison = compare_runs(
        plain,
        warm,
        per_stream_target=on.bench_defaults.per_stream_target_tok_s,
        spec_name=name,
        max_batch=max_batch,
        spec_tokens=k,
    )
    report = write_report(
        [out / "eagle3-t0.7", out / "eagle3-t0.0", out / "no-eagle3-t0.7"],
        out / "report",
        compare=(out / "no-eagle3-t0.7", out / "eagle3-t0.7"),
        validate=out / "validate",
    )
    per_stream: float = on.bench_defaults.per_stream_target_tok_s or 60.0
    advice = comparison.speculation
    setting = advice.speculative_config if advice else None
    return DemoDocument(
        schema_version=DEMO_VERSION,
        table=tuple(deployment_table(warm)),
        recommendation=advice.recommendation if advice else None,
        speculative_config=setting,
        per_stream=PerStreamReach(
            target_tok_s=per_stream,
            temperature_0_7=highest_meeting(warm, per_stream),
            temperature_0_0=highest_meeting(cold, per_stream),
        ),
        report=str(report.html),
        seconds=round(time.monotonic() - started, 1),
    )
