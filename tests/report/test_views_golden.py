"""Golden files for every view people read: each is drawn into a 100-column console and
compared exactly with its file in golden/.

The inputs are real: summaries, a validate.json and a sim fit result that servekit wrote
(checked in under data/, read the way the commands read them; data/README.md gives the
commands), the plans of built-in profiles, and the startup logs of the plan, doctor and
render tests. A static view is drawn twice: as plain text (`NAME.txt`, what a pipe
receives) and with ANSI styles (`NAME.ansi`, what a terminal shows; `cat` it to review).
Progress displays are drawn only as plain text, where rich prints their final state once,
with a fixed clock. Set SERVEKIT_UPDATE_GOLDEN=1 to rewrite the files, then review the diff.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from rich.console import Console

from servekit.analyze.compare import compare_runs, speculation_facts
from servekit.bench.store import read_records, read_summary, write_summary_tables
from servekit.doctor import run as doctor_run
from servekit.doctor.facts import ModelDirReport, ShmReport
from servekit.doctor.log_analysis import analyze_log
from servekit.doctor.probes import probe_docker, probe_gpus
from servekit.doctor.run import Examination, examine
from servekit.hardware import lookup_gpu
from servekit.plan import make_plan, plan_inputs
from servekit.plan.checkpoint import architecture_from_config, read_checkpoint
from servekit.plan.reconcile import reconcile
from servekit.plan.startup_log import parse_startup_log
from servekit.profiles import Profile, load_profile
from servekit.profiles.loader import BUILTIN_DIR
from servekit.report.build import load_run, summary_profile
from servekit.report.build import points_table as report_points_table
from servekit.report.doctor_view import print_doctor
from servekit.report.document import Section, render_html, render_markdown
from servekit.report.live import LiveProgress
from servekit.report.log_view import print_analysis
from servekit.report.plan_view import plan_view
from servekit.report.startup_view import print_ready, print_started, stage_progress
from servekit.report.tables import (
    calibration_table,
    checks_table,
    coefficients_table,
    compare_table,
    points_table,
)
from servekit.results.summary import Summary
from servekit.results.validate import load_validate
from servekit.runtime.follow import StartupOutcome
from servekit.runtime.launch import docker_argv, process_argv
from servekit.runtime.state import EngineState
from servekit.units import GIB

HERE = Path(__file__).parent
DATA = HERE / "data"
GOLDEN_DIR = HERE / "golden"
TESTS = HERE.parent
M3 = "minimax-m3-mxfp8-8xa800"
LLAMA = "llama-3.1-70b-4xh100"
CPU_LOG = TESTS / "render" / "data" / "vllm_cpu_0320_startup.log"
M3_LOG = TESTS / "plan" / "data" / "m3_a800_tp8.log"
M3_CRASH_LOG = TESTS / "doctor" / "data" / "m3_v0251_illegal_memory_access.log"
TOO_LONG_LOG = TESTS / "plan" / "data" / "max_model_len_too_long.log"
CONTAINER_ID = "3f9c2a7d41b08e6f5a2c9d7e1b3f4a6c8d0e2f4a6b8c0d2e4f6a8b0c2d4e6f8a"

Golden = Callable[[str, Path], None]
Draw = Callable[[Console], None]


def _console(
    buffer: io.StringIO, *, styled: bool, clock: Callable[[], float] | None = None
) -> Console:
    """A console like the CLI's (`stdout_console`) on a string, 100 columns wide, with nothing
    taken from the environment or the terminal: plain, or ANSI with the 16 standard colours."""
    return Console(
        file=buffer,
        width=100,
        height=60,
        force_terminal=styled,
        force_interactive=False,
        color_system="standard" if styled else None,
        no_color=False,
        legacy_windows=False,
        highlight=False,
        soft_wrap=True,
        get_time=clock,
    )


def _drawn(draw: Draw, *, styled: bool) -> str:
    """What `draw` prints on a fresh test console."""
    buffer = io.StringIO()
    draw(_console(buffer, styled=styled))
    return buffer.getvalue()


def _builtin(name: str) -> Profile:
    """A built-in profile by its file, so no user profile of the same name shadows it."""
    return load_profile(str(BUILTIN_DIR / f"{name}.yaml"))


# --- tables ---------------------------------------------------------------------------------


def _summary(run: str) -> Summary:
    """A checked-in run's summary.json, loaded the way servekit compare and report load it."""
    return read_summary(DATA / run)


def _points(run: str, title: str) -> Draw:
    return lambda console: console.print(points_table(_summary(run).points, title=title))


def _bench_points(console: Console) -> None:
    summary = _summary("bench-faulty")
    title = f"bench {summary.target.url} ({summary.target.model})"
    console.print(points_table(summary.points, title=title))


def _checks(console: Console) -> None:
    doc = json.loads((DATA / "validate-llama.json").read_text(encoding="utf-8"))
    checks = load_validate(doc).checks
    console.print(checks_table(checks, title=f"validate {doc['target']['url']}"))


def _compare(console: Console) -> None:
    a, b = _summary("sim-m3-no-eagle3"), _summary("sim-m3")
    name, max_batch, k = speculation_facts([summary_profile(a), summary_profile(b)])
    doc = compare_runs(a, b, per_stream_target=None, spec_name=name, max_batch=max_batch,
                       spec_tokens=k)  # fmt: skip
    console.print(compare_table(doc.points, title="B = sim-m3  vs  A = sim-m3-no-eagle3"))


def _fit(console: Console) -> None:
    doc = json.loads((DATA / "fit-m3.json").read_text(encoding="utf-8"))
    console.print(calibration_table(doc["points"], title=f"sim fit {doc['profile']}"))
    console.print(coefficients_table(doc["coefficients"], title="step coefficients"))


# --- plan, logs, startup --------------------------------------------------------------------


def _plan(name: str, log: Path | None = None) -> Draw:
    def draw(console: Console) -> None:
        profile = _builtin(name)
        plan = make_plan(plan_inputs(profile, lookup_gpu(profile.hardware.gpu)))
        if log is None:
            console.print(plan_view(plan))
            return
        figures = parse_startup_log(log.read_text(encoding="utf-8"))
        console.print(plan_view(plan, reconcile(plan, figures), figures.failures))

    return draw


def _log(path: Path, *, gpu: str | None = None, quantization: str | None = None,
         verdict: bool = True) -> Draw:  # fmt: skip
    def draw(console: Console) -> None:
        capability = lookup_gpu(gpu).compute_capability if gpu else None
        text = path.read_text(encoding="utf-8", errors="replace")
        analysis = analyze_log(text, compute_capability=capability, quantization=quantization)
        print_analysis(console, analysis, path.name, verdict=verdict)

    return draw


def _process_state() -> EngineState:
    """What `up --runtime process --launcher vllm` records for the Llama profile."""
    profile = _builtin(LLAMA)
    return EngineState(profile=profile.name, runtime="process", url="http://127.0.0.1:8000",
                       started_at=1_764_576_000.0, log_path=f"state/{profile.name}.log",
                       argv=process_argv(profile, "vllm"), pid=41_234,
                       pid_started_at=1_764_576_000.2)  # fmt: skip


def _docker_state() -> EngineState:
    """What `up --runtime docker` records for the reference deployment."""
    profile = _builtin(M3)
    return EngineState(profile=profile.name, runtime="docker", url="http://127.0.0.1:8000",
                       started_at=1_764_576_000.0, log_path=f"state/{profile.name}.log",
                       argv=docker_argv(profile), env_names=sorted(profile.env),
                       container=f"servekit-{profile.name}",
                       container_id=CONTAINER_ID)  # fmt: skip


def _ready(console: Console) -> None:
    analysis = analyze_log(CPU_LOG.read_text(encoding="utf-8"))
    outcome = StartupOutcome(ready=True, stage="ready", elapsed_s=81.4)
    print_ready(console, _process_state(), outcome, analysis, "tiny-llama")


VIEWS: dict[str, Draw] = {
    "points-sim-m3": _points("sim-m3", f"simulated {M3}"),
    "points-sim-m3-rate": _points("sim-m3-rate", f"simulated {M3}"),
    "points-bench-faulty": _bench_points,
    "checks-validate-llama": _checks,
    "compare-eagle3-on-vs-off": _compare,
    "fit-sim-m3": _fit,
    f"plan-{M3}": _plan(M3),
    f"plan-{LLAMA}": _plan(LLAMA),
    f"plan-{M3}-from-log": _plan(M3, M3_LOG),
    f"plan-{M3}-from-crash-log": _plan(M3, M3_CRASH_LOG),
    "log-vllm-cpu-startup": _log(CPU_LOG),
    "log-m3-v0251-illegal-memory-access": _log(
        M3_CRASH_LOG, gpu="A800-80GB-SXM", quantization="mxfp8"
    ),
    "log-max-model-len-too-long": _log(TOO_LONG_LOG),
    "log-m3-crash-without-verdict": _log(M3_CRASH_LOG, verdict=False),
    "startup-started-process": lambda console: print_started(console, _process_state()),
    "startup-started-docker": lambda console: print_started(console, _docker_state()),
    "startup-ready": _ready,
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_matches_golden_files(name: str, golden: Golden) -> None:
    """Each view prints byte-for-byte its reviewed plain and styled golden files."""
    golden(_drawn(VIEWS[name], styled=False), GOLDEN_DIR / f"{name}.txt")
    golden(_drawn(VIEWS[name], styled=True), GOLDEN_DIR / f"{name}.ansi")


def test_styled_and_plain_differ_only_in_styles() -> None:
    """The styled files carry escape codes and nothing else: stripped, they are the plain ones."""
    for name, draw in VIEWS.items():
        styled = _drawn(draw, styled=True)
        assert "\x1b[" in styled, name
        assert re.sub(r"\x1b\[[0-9;]*m", "", styled) == _drawn(draw, styled=False), name


def test_plan_view_with_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, golden: Golden
) -> None:
    """`plan --model-dir` adds the checkpoint's line: facts from config.json, bytes from the
    shards (a tiny Llama checkpoint, read from a relative path so no temp path is printed)."""
    np = pytest.importorskip("numpy")
    safetensors = pytest.importorskip("safetensors.numpy")
    model = tmp_path / "tiny-llama"
    model.mkdir()
    config = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 8, "vocab_size": 512, "intermediate_size": 512,
              "torch_dtype": "bfloat16"}  # fmt: skip
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tensors = {
        "model.embed_tokens.weight": np.zeros((512, 256), dtype=np.float16),
        "model.layers.0.self_attn.q_proj.weight": np.zeros((256, 256), dtype=np.float16),
        "model.layers.0.mlp.down_proj.weight": np.zeros((256, 512), dtype=np.float16),
    }
    safetensors.save_file(tensors, str(model / "model.safetensors"))
    monkeypatch.chdir(tmp_path)
    checkpoint = read_checkpoint("tiny-llama")
    profile = _builtin(LLAMA)
    arch = architecture_from_config(checkpoint.config)
    plan = make_plan(plan_inputs(profile, lookup_gpu(profile.hardware.gpu), arch))
    for styled, suffix in ((False, "txt"), (True, "ansi")):
        text = _drawn(lambda c: c.print(plan_view(plan, checkpoint=checkpoint)), styled=styled)
        golden(text, GOLDEN_DIR / f"plan-{LLAMA}-checkpoint.{suffix}")


# --- doctor ---------------------------------------------------------------------------------


def _doctor_helper(name: str) -> ModuleType:
    """A helper module of the doctor tests (their fake NVML), loaded from its file."""
    module_name = f"_doctor_tests_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, TESTS / "doctor" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _docker_runner(outputs: dict[str, tuple[int, str, str]]) -> Callable[..., Any]:
    """A `subprocess.run` stand-in answering `docker version` and `docker info`."""

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        code, out, err = outputs[argv[1]]
        return subprocess.CompletedProcess(argv, code, out, err)

    return run


NO_DAEMON = {
    "version": (
        1,
        json.dumps({"Client": {"Version": "28.2.2"}, "Server": None}),
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.",
    )
}
DOCKER_VERSIONS = {"Client": {"Version": "28.2.2"}, "Server": {"Version": "28.2.2"}}
NVIDIA_DAEMON = {
    "version": (0, json.dumps(DOCKER_VERSIONS), ""),
    "info": (0, json.dumps({"nvidia": {}, "runc": {}}), ""),
}


def _examined(
    monkeypatch: pytest.MonkeyPatch,
    profile: Profile,
    *,
    gpus: list[Any],
    docker: dict[str, tuple[int, str, str]],
    shm_bytes: int,
    model_dirs: tuple[ModelDirReport, ...],
) -> Examination:
    """`examine` with this machine's probes replaced: NVML by the doctor tests' fake, docker
    by canned CLI answers, /dev/shm and the model directories by fixed reports."""
    nvml = _doctor_helper("fake_nvml").FakeNvml(gpus=gpus)
    monkeypatch.setattr(doctor_run, "probe_gpus", lambda: probe_gpus(nvml))
    monkeypatch.setattr(doctor_run, "probe_docker",
                        lambda: probe_docker(run=_docker_runner(docker),
                                             which=lambda _: "/usr/bin/docker"))  # fmt: skip
    monkeypatch.setattr(doctor_run, "probe_shm", lambda: ShmReport("/dev/shm", shm_bytes))
    monkeypatch.setattr(doctor_run, "probe_model_dirs", lambda _profile, _dir: model_dirs)
    return examine(profile, runtime="docker")


def test_doctor_view_with_problems(monkeypatch: pytest.MonkeyPatch, golden: Golden) -> None:
    """The reference deployment on 8 fake A800s, a docker CLI without its daemon, 64 MiB of
    /dev/shm and no checkpoint: errors and warnings, most serious first, with fixes."""
    fake = _doctor_helper("fake_nvml")
    profile = _builtin(M3)
    missing = tuple(
        ModelDirReport(role, path, f"/srv{path}", exists=False, free_bytes=3 * 1024 * GIB)
        for role, path in (("model", profile.model.path), ("draft", "/models/MiniMax-M3-EAGLE3"))
    )
    result = _examined(monkeypatch, profile, gpus=[fake.FakeGpu() for _ in range(8)],
                       docker=NO_DAEMON, shm_bytes=64 * 2**20, model_dirs=missing)  # fmt: skip
    assert result.exit_code == 3
    for styled, suffix in ((False, "txt"), (True, "ansi")):
        golden(_drawn(lambda c: print_doctor(c, result), styled=styled),
               GOLDEN_DIR / f"doctor-{M3}-problems.{suffix}")  # fmt: skip


def test_doctor_view_ready(monkeypatch: pytest.MonkeyPatch, golden: Golden) -> None:
    """The Llama profile on 4 fake H100s with docker's NVIDIA runtime, a large /dev/shm and
    the whole checkpoint: only informational findings and warnings, exit 0."""
    fake = _doctor_helper("fake_nvml")
    profile = _builtin(LLAMA)
    h100 = fake.FakeGpu(name="NVIDIA H100 80GB HBM3", memory=81559 * 2**20, capability=(9, 0))
    present = (ModelDirReport("model", profile.model.path, f"/srv{profile.model.path}",
                              exists=True, shard_count=30, total_bytes=141_107_412_992,
                              free_bytes=2 * 1024 * GIB),)  # fmt: skip
    result = _examined(monkeypatch, profile, gpus=[h100] * 4, docker=NVIDIA_DAEMON,
                       shm_bytes=16 * GIB, model_dirs=present)  # fmt: skip
    assert result.exit_code == 0
    for styled, suffix in ((False, "txt"), (True, "ansi")):
        golden(_drawn(lambda c: print_doctor(c, result), styled=styled),
               GOLDEN_DIR / f"doctor-{LLAMA}-ready.{suffix}")  # fmt: skip


# --- progress displays ----------------------------------------------------------------------


def test_live_progress_during_a_bench_run(golden: Golden) -> None:
    """bench's bars as the faulty-server run's records arrive, the clock at each record's
    end: the first point done, the second stopped halfway (requests done, output tok/s so
    far, errors)."""
    records = read_records(DATA / "bench-faulty")
    now = [0.0]
    buffer = io.StringIO()
    with LiveProgress(console=_console(buffer, styled=False, clock=lambda: now[0])) as live:
        for number, label in enumerate(dict.fromkeys(r.point for r in records)):
            point = [r for r in records if r.point == label]
            now[0] = min(r.scheduled_ns for r in point) / 1e9
            live.start_point(label, len(point))
            for record in point[: len(point) // 2] if number else point:
                now[0] = record.end_ns / 1e9
                live.record(record)
    golden(buffer.getvalue(), GOLDEN_DIR / "live-bench-faulty.txt")


def test_live_progress_disabled_draws_nothing() -> None:
    """With --json the bars are off: not a character reaches the console."""
    buffer = io.StringIO()
    with LiveProgress(enabled=False, console=_console(buffer, styled=False)) as live:
        live.start_point("c=1", 1)
        live.record(read_records(DATA / "bench-faulty")[0])
    assert buffer.getvalue() == ""


def test_startup_progress(golden: Golden) -> None:
    """`up`'s display while waiting: one line per stage reached with its time, then the bar's
    final state. The view only draws; the stages come at the scripted times the real CPU
    startup log goes through."""
    stages = [("weights", 2.1), ("profiling", 9.8), ("kv_cache", 61.3), ("ready", 81.4)]
    buffer = io.StringIO()
    with stage_progress(_console(buffer, styled=False, clock=lambda: 100.0)) as on_stage:
        for stage, elapsed in stages:
            on_stage(stage, elapsed)
    golden(buffer.getvalue(), GOLDEN_DIR / "startup-progress.txt")


# --- the points table as Markdown, CSV and HTML ----------------------------------------------


@pytest.mark.parametrize("run", ["sim-m3", "sim-m3-rate", "bench-faulty"])
def test_summary_tables_beside_summary_json(run: str, tmp_path: Path, golden: Golden) -> None:
    """bench's summary.md and summary.csv, written from a summary as read back from disk."""
    write_summary_tables(tmp_path, _summary(run))
    golden((tmp_path / "summary.md").read_text(encoding="utf-8"), GOLDEN_DIR / f"summary-{run}.md")
    golden(
        (tmp_path / "summary.csv").read_text(encoding="utf-8"), GOLDEN_DIR / f"summary-{run}.csv"
    )


@pytest.mark.parametrize("run", ["sim-m3", "sim-m3-rate", "bench-faulty"])
def test_report_points_table(run: str, golden: Golden) -> None:
    """The report's per-load table, alone in a section, as HTML and as Markdown."""
    sections = [Section("Runs", tables=[report_points_table(load_run(DATA / run))])]
    golden(render_html("points", sections), GOLDEN_DIR / f"report-points-{run}.html")
    golden(render_markdown("points", sections), GOLDEN_DIR / f"report-points-{run}.md")


def test_every_golden_file_belongs_to_a_test() -> None:
    """No stale golden files linger for views that are no longer drawn."""
    expected = {f"{name}.{suffix}" for name in VIEWS for suffix in ("txt", "ansi")}
    expected |= {f"plan-{LLAMA}-checkpoint.{s}" for s in ("txt", "ansi")}
    expected |= {f"doctor-{M3}-problems.{s}" for s in ("txt", "ansi")}
    expected |= {f"doctor-{LLAMA}-ready.{s}" for s in ("txt", "ansi")}
    expected |= {"live-bench-faulty.txt", "startup-progress.txt"}
    for run in ("sim-m3", "sim-m3-rate", "bench-faulty"):
        expected |= {f"summary-{run}.md", f"summary-{run}.csv"}
        expected |= {f"report-points-{run}.html", f"report-points-{run}.md"}
    expected |= {"verdict-sim-m3.md", "verdict-sim-m3.html"}  # test_verdict.py
    assert {path.name for path in GOLDEN_DIR.iterdir()} == expected
