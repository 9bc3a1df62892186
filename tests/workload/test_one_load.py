"""One traffic value (issue #29): bench, sim run, tune and the demo build the same `Load`
from the same traffic options, and bench and the simulator plan one schedule from it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from servekit.bench.spec import bench_points
from servekit.cli._bench_spec import bench_inputs
from servekit.cli._sim_points import sim_load
from servekit.cli._tune_workload import tune_load
from servekit.cli.bench import bench_command
from servekit.cli.main import cli
from servekit.cli.sim import sim_group
from servekit.cli.tune import tune_command
from servekit.demo import QUICK, demo_load
from servekit.profiles import load_profile
from servekit.sim.load_points import sim_points
from servekit.sim.offline import LoadPoint
from servekit.workload.load import Level, Load

PROFILE = "minimax-m3-mxfp8-8xa800"
TOOLS = Path(__file__).resolve().parents[2] / "examples" / "agent" / "tools.json"


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    """A servekit JSONL trace of 6 requests, half a second apart."""
    path = tmp_path / "t.jsonl"
    rows = [{"timestamp_s": 0.5 * i, "input_len": 90 + i, "output_len": 8 + i} for i in range(6)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _params(command: click.Command, args: list[str]) -> Iterator[dict[str, Any]]:
    """The command's keyword arguments for `args`, inside its click context (as the command
    body sees them: refusals read where each option came from)."""
    with command.make_context(command.name or "", args) as ctx:
        yield dict(ctx.params)


def bench_load(args: list[str]) -> Load:
    for opts in _params(bench_command, ["--profile", PROFILE, "--url", "http://127.0.0.1:9",
                                        *args]):  # fmt: skip
        for name in ("as_json", "out", "slo", "force", "resummarize", "max_failure_rate"):
            opts.pop(name)
        return bench_inputs(opts)[3]
    raise AssertionError("unreachable")


def sim_run_load(args: list[str]) -> Load:
    run = sim_group.commands["run"]
    for opts in _params(run, ["--profile", PROFILE, "--out", "unused", *args]):
        profile = load_profile(PROFILE)
        return sim_load(opts, profile, profile.bench_defaults.input_len,
                        profile.bench_defaults.output_len)  # fmt: skip
    raise AssertionError("unreachable")


def tune_run_load(args: list[str]) -> Load:
    for opts in _params(tune_command, [PROFILE, "--slo", "ttft_p99<=2s", "--out", "unused", *args]):
        return tune_load(load_profile(PROFILE), opts)
    raise AssertionError("unreachable")


COMMON = ["--input-len", "64", "--output-len", "16", "--temperature", "0.5", "--seed", "3"]
CASES = {
    "closed loop": ["--concurrency", "1,4", "--requests-per-point", "12", *COMMON],
    "open loop": ["--rate", "2,8", "--arrival", "gamma:2", "--requests-per-point", "9", *COMMON],
    "sessions": ["--turns", "3", "--sessions", "4", "--concurrency", "2", "--think-time",
                 "0.5:exponential", *COMMON],
    "agent loops": ["--agent", "--tools", str(TOOLS), "--sessions", "3", "--agent-turns", "3",
                    "--tool-latency", "0.2", "--concurrency", "2", *COMMON],
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_bench_sim_run_and_tune_build_one_load(case: str) -> None:
    """The same options give equal Loads; tune's has no levels (it searches them)."""
    args = CASES[case]
    from_bench = bench_load(args)
    assert sim_run_load(args) == from_bench
    levels = [a for a in args if a not in ("--concurrency", "--rate")]
    for level_arg in ("1,4", "2,8", "2"):
        if level_arg in levels:
            levels.remove(level_arg)
    loop = ["--load", "rate"] if "--rate" in args else []
    assert tune_run_load([*levels, *loop]) == dataclasses.replace(from_bench, levels=())
    assert from_bench.kind == {"closed loop": "fixed", "open loop": "fixed"}.get(
        case, "sessions" if case == "sessions" else "agent"
    )


def test_a_trace_is_one_load_in_bench_sim_run_and_tune(trace_file: Path) -> None:
    """A trace replay: the same Load (its requests, its one point) in all three."""
    args = ["--trace", str(trace_file), "--trace-format", "jsonl", "--time-scale", "0.5",
            "--temperature", "0.5"]  # fmt: skip
    from_bench = bench_load(args)
    assert from_bench.kind == "trace"
    assert from_bench.trace is not None
    assert len(from_bench.trace.requests) == 6
    assert sim_run_load(args) == from_bench
    assert tune_run_load(args) == from_bench
    assert [p.label for p in bench_points(from_bench)] == ["trace"]
    assert [p.label for p in sim_points(from_bench)] == ["trace"]


def test_the_demo_load_is_benchs_for_the_same_options() -> None:
    """The demo's sweep is bench's Load for its concurrency, seed, lengths and temperature;
    only its per-level request counts (two rounds of each concurrency) are its own."""
    profile = load_profile(PROFILE)
    demo = demo_load(profile, QUICK.concurrency, 0.7, QUICK)
    levels = ",".join(str(c) for c in QUICK.concurrency)
    from_bench = bench_load(["--concurrency", levels, "--temperature", "0.7", "--seed", "7",
                             "--requests-per-point", str(QUICK.min_requests)])  # fmt: skip
    assert demo == dataclasses.replace(
        from_bench,
        levels=tuple(dataclasses.replace(lv, requests=QUICK.requests(lv.concurrency or 0))
                     for lv in from_bench.levels),
    )  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_bench_and_the_simulator_plan_the_same_points(case: str) -> None:
    """From one Load: the same labels, loop kind, level and request count per point."""
    load = bench_load(CASES[case])
    for bench_point, sim_point in zip(bench_points(load), sim_points(load), strict=True):
        assert bench_point.label == sim_point.label
        assert bench_point.concurrency == sim_point.concurrency
        assert bench_point.rate_rps == sim_point.rate_rps
        if isinstance(sim_point, LoadPoint):
            assert (bench_point.requests or load.requests_per_point) == sim_point.requests


def _by_point(records_file: Path) -> dict[str, list[dict[str, Any]]]:
    """A run's records by point, each point's in request order (ids end in -N)."""
    points: dict[str, list[dict[str, Any]]] = {}
    for line in records_file.read_text().splitlines():
        record = json.loads(line)
        points.setdefault(record["point"], []).append(record)
    for records in points.values():
        records.sort(key=lambda r: int(r["id"].rsplit("-", 1)[1]))
    return points


@pytest.mark.integration
def test_bench_against_sim_serve_and_sim_run_send_one_schedule(
    tmp_path: Path, start_server: Any
) -> None:
    """The same open-loop options, run by `sim run` offline and by `bench` against a live
    `sim serve`: the same points, request counts, token counts and send times (each
    request's scheduled offset from the point's first, to the nanosecond)."""
    args = ["--rate", "40,160", "--arrival", "gamma:2", "--requests-per-point", "9",
            "--input-len", "64", "--output-len", "16", "--temperature", "0",
            "--seed", "3"]  # fmt: skip
    _, url = start_server()
    runner = CliRunner()
    simulated = runner.invoke(cli, ["sim", "run", "--profile", PROFILE, "--out",
                                    str(tmp_path / "sim"), *args])  # fmt: skip
    assert simulated.exit_code == 0, simulated.output
    measured = runner.invoke(cli, ["bench", "--url", url, "--out", str(tmp_path / "bench"),
                                   "--warmup", "0", *args])  # fmt: skip
    assert measured.exit_code == 0, measured.output
    sim = _by_point(tmp_path / "sim" / "records.jsonl")
    bench = _by_point(tmp_path / "bench" / "records.jsonl")
    assert list(sim) == list(bench) == ["rate=40", "rate=160"]
    for label in sim:
        assert len(sim[label]) == len(bench[label]) == 9
        for field in ("prompt_tokens", "output_tokens"):
            assert [r[field] for r in bench[label]] == [r[field] for r in sim[label]], field
        offsets = {
            name: [r["scheduled_ns"] - run[label][0]["scheduled_ns"] for r in run[label]]
            for name, run in (("sim", sim), ("bench", bench))
        }
        assert offsets["bench"] == offsets["sim"]
        assert len(set(offsets["sim"])) == 9  # a real draw: distinct times


def test_a_level_is_a_concurrency_or_a_rate() -> None:
    """Neither or both is refused; labels are formatted in this one place."""
    assert Level(concurrency=4).label == "c=4"
    assert Level(rate_rps=0.5).label == "rate=0.5"
    assert Level(rate_rps=float("inf")).label == "rate=inf"
    with pytest.raises(ValueError, match="not both or neither"):
        Level()
    with pytest.raises(ValueError, match="not both or neither"):
        Level(concurrency=1, rate_rps=1.0)
