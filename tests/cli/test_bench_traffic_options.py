"""Tests of bench's traffic options: --trace replay points, sessions, agent loops, and the
combinations bench refuses (one line each, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.bench.spec import BenchSpec, PointSpec
from servekit.cli._bench_sessions import sessions_input
from servekit.cli._bench_spec import bench_inputs
from servekit.cli._load_options import LoadOptions
from servekit.cli.bench import bench_command
from servekit.cli.main import cli
from servekit.errors import UsageError
from servekit.workload.sessions import Delay, Turn

URL = ["--url", "http://127.0.0.1:9"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def inputs(*args: str) -> tuple[BenchSpec, list[PointSpec]]:
    """bench_inputs for a bench command line, as click parses it."""
    ctx = bench_command.make_context("bench", [*URL, *args])
    opts: dict[str, Any] = dict(ctx.params)
    for name in ("as_json", "out", "slo", "force", "resummarize", "max_failure_rate"):
        opts.pop(name)
    spec, points, _, _ = bench_inputs(opts)
    return spec, points


def refusal(*args: str) -> str:
    """The usage error bench_inputs raises for a command line."""
    with pytest.raises(UsageError) as caught:
        inputs(*args)
    assert caught.value.exit_code == 2
    return caught.value.message


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    """A servekit JSONL trace of 5 requests at 0, 1, 2, 3, 4 s."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp_s": 10 + t, "input_len": 100, "output_len": 8}) + "\n"
            for t in range(5)
        )
    )
    return path


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    """A tools file with one weather tool."""
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return path


@pytest.fixture
def conversations_file(tmp_path: Path) -> Path:
    """A JSONL conversations file of two sessions."""
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"id": "a", "turns": [{"user": "hi"}, {"user": "more", "output_len": 5}]}\n'
        '{"id": "b", "turns": [{"user": "x"}, {"user": "y"}, {"user": "z"}]}\n'
    )
    return path


def test_trace_makes_one_scheduled_point(trace_file: Path) -> None:
    """--trace gives one 'trace' point whose schedule is the windowed, scaled offsets."""
    spec, points = inputs(
        "--trace", str(trace_file), "--trace-format", "jsonl", "--time-scale", "0.5",
        "--trace-start", "1", "--max-requests", "3",
    )  # fmt: skip
    assert points == [PointSpec("trace", rate_rps=3 / 1.0, schedule=(0.0, 0.5, 1.0), requests=3)]
    assert spec.trace is not None
    assert [r.line for r in spec.trace.requests] == [2, 3, 4]
    assert (spec.trace.time_scale, spec.trace.start_s, spec.sessions) == (0.5, 1.0, None)


def test_trace_rate_over_a_window_and_a_single_request(trace_file: Path) -> None:
    """With --trace-duration the rate is requests over the scaled window; a lone request
    is one per second (finite)."""
    _, points = inputs(
        "--trace", str(trace_file), "--trace-format", "jsonl", "--trace-duration", "2.5",
        "--time-scale", "2",
    )  # fmt: skip
    assert (points[0].requests, points[0].rate_rps) == (3, 3 / 5.0)
    _, points = inputs("--trace", str(trace_file), "--trace-format", "jsonl", "--max-requests", "1")
    assert (points[0].schedule, points[0].rate_rps) == ((0.0,), 1.0)


def test_trace_with_a_profile_checks_max_model_len(tmp_path: Path) -> None:
    """A profile's max_model_len bounds the trace's requests; its default concurrency does
    not apply to a replay."""
    path = tmp_path / "long.jsonl"
    path.write_text(
        '{"timestamp_s": 0, "input_len": 30000, "output_len": 10}\n'
        '{"timestamp_s": 1, "input_len": 32000, "output_len": 1000}\n'
    )
    args = ["--profile", "llama-3.1-70b-4xh100", "--trace", str(path), "--trace-format", "jsonl"]
    ctx = bench_command.make_context("bench", args)
    opts = {k: v for k, v in ctx.params.items() if k not in _NOT_OPTS}
    with pytest.raises(UsageError) as caught:
        bench_inputs(opts)
    assert caught.value.message == (
        f"{path}:2: input_len 32000 + output_len 1000 = 33000 tokens exceeds max_model_len 32768"
    )
    opts["max_requests"] = 1
    _, points, _, _ = bench_inputs(opts)
    assert [p.label for p in points] == ["trace"]


_NOT_OPTS = {"as_json", "out", "slo", "force", "resummarize", "max_failure_rate"}


def test_bad_trace_file_is_one_line_exit_2(tmp_path: Path) -> None:
    """A bad trace through the CLI is one stderr line naming file, line and field; exit 2."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
                    '{"timestamp": 5, "input_length": 10, "output_length": 1}\n')  # fmt: skip
    result = CliRunner().invoke(
        cli, ["bench", *URL, "--trace", str(path), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"servekit: error: {path}:2: hash_ids is missing; ")


LENGTHS_REFUSED = (
    "--trace gives every request's lengths and prefix sharing; it cannot take --input-len, "
    "--output-len or --shared-prefix"
)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--turns", "2"],
            "--trace replays single requests; it cannot take --conversations or --turns",
        ),
        (["--agent"], "--trace cannot run --agent loops"),
        (
            ["--concurrency", "4"],
            "--trace sets the send times; it cannot take --concurrency or --rate",
        ),
        (["--rate", "2"], "--trace sets the send times; it cannot take --concurrency or --rate"),
        (["--workers", "2"], "--trace with --workers > 1 is not supported yet"),
        (["--input-len", "64"], LENGTHS_REFUSED),
        (["--output-len", "64"], LENGTHS_REFUSED),
        (["--shared-prefix", "16"], LENGTHS_REFUSED),
    ],
)
def test_trace_refusals(trace_file: Path, extra: list[str], message: str) -> None:
    """--trace refuses options that set the load another way, one line each."""
    assert refusal("--trace", str(trace_file), "--trace-format", "jsonl", *extra) == message


def test_trace_refuses_a_dataset(trace_file: Path, tmp_path: Path) -> None:
    """--trace and --dataset cannot both give the prompts."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    assert refusal("--trace", str(trace_file), "--dataset", str(data)) == (
        "--trace gives the prompt lengths; it cannot take --dataset"
    )


def test_synthetic_sessions_per_point(tmp_path: Path) -> None:
    """--turns alone: synthetic sessions, --sessions per point for every point."""
    spec, points = inputs(
        "--turns", "3", "--concurrency", "1,4", "--sessions", "5", "--input-len", "64",
        "--output-len", "16", "--think-time", "1.5:exponential",
    )  # fmt: skip
    assert [p.label for p in points] == ["c=1", "c=4"]
    sessions = spec.sessions
    assert sessions is not None
    assert (sessions.source, sessions.sessions_per_point, len(sessions.sessions)) == (
        "synthetic",
        5,
        10,
    )
    assert sessions.think_time == Delay(1.5, "exponential")
    assert sessions.agent is None
    assert all(p.turns == (Turn(None, 16, 64),) * 3 for p in sessions.sessions)


def test_default_sessions_per_point() -> None:
    """Without --sessions a point runs 16 sessions."""
    spec, _ = inputs("--turns", "2", "--rate", "1")
    assert spec.sessions is not None
    assert (spec.sessions.sessions_per_point, len(spec.sessions.sessions)) == (16, 16)


def test_conversations_file(conversations_file: Path) -> None:
    """--conversations reads every session; --turns caps their turns."""
    spec, _ = inputs(
        "--conversations", str(conversations_file), "--turns", "2", "--concurrency", "2",
        "--output-len", "40",
    )  # fmt: skip
    sessions = spec.sessions
    assert sessions is not None
    assert sessions.source == f"jsonl {conversations_file}"
    assert [p.id for p in sessions.sessions] == ["a", "b"]
    assert sessions.sessions[0].turns == (Turn("hi", 40), Turn("more", 5))
    assert len(sessions.sessions[1].turns) == 2


def test_sharegpt_conversations_source(tmp_path: Path) -> None:
    """A ShareGPT list is named as such in the source."""
    path = tmp_path / "s.json"
    path.write_text('[{"conversations": [{"from": "human", "value": "q"}]}]')
    spec, _ = inputs("--conversations", str(path), "--concurrency", "1")
    assert spec.sessions is not None
    assert spec.sessions.source == f"sharegpt {path}"


def test_agent_loops(tools_file: Path) -> None:
    """--agent with --tools: one-turn synthetic agent sessions with the tool options."""
    spec, _ = inputs(
        "--agent", "--tools", str(tools_file), "--concurrency", "2", "--tool-latency",
        "0.2:uniform", "--tool-result", '{"temp_c": 21}', "--agent-turns", "5",
    )  # fmt: skip
    sessions = spec.sessions
    assert sessions is not None
    assert sessions.agent is not None
    assert sessions.agent.tools == tuple(TOOLS)
    assert sessions.agent.tool_latency == Delay(0.2, "uniform")
    assert (sessions.agent.tool_result, sessions.agent.max_turns) == ('{"temp_c": 21}', 5)
    assert all(len(p.turns) == 1 for p in sessions.sessions)


def test_agent_defaults(tools_file: Path) -> None:
    """The agent options' defaults: 0.1 s latency, {"ok": true}, 8 turns."""
    spec, _ = inputs("--agent", "--tools", str(tools_file), "--rate", "1")
    assert spec.sessions is not None
    agent = spec.sessions.agent
    assert agent is not None
    assert (agent.tool_latency, agent.tool_result, agent.max_turns) == (
        Delay(0.1),
        '{"ok": true}',
        8,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "--concurrency", "1"], "--agent needs tools the model may call"),
        (
            ["--turns", "2", "--concurrency", "1", "--api", "completions"],
            "sessions send chat histories; they cannot run with --api completions",
        ),
        (
            ["--turns", "2", "--concurrency", "1", "--workers", "2"],
            "sessions with --workers > 1 are not supported yet",
        ),
        (
            ["--sessions", "4", "--concurrency", "1"],
            "--sessions counts sessions; it needs --conversations, --turns or --agent",
        ),
        (
            ["--turns", "2", "--concurrency", "1", "--think-time", "-1"],
            "--think-time '-1' is not S, S:exponential or S:uniform with S 0 or more seconds",
        ),
        (
            ["--turns", "2", "--concurrency", "1", "--tool-latency", "x"],
            None,  # tool latency only matters to agents: not parsed without --agent
        ),
    ],
)
def test_session_refusals(args: list[str], message: str | None) -> None:
    """Session options that cannot work are one line each."""
    if message is None:
        inputs(*args)
    else:
        assert refusal(*args) == message


def test_sessions_refuse_a_dataset(tmp_path: Path) -> None:
    """Sessions take no --dataset."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    assert refusal("--turns", "2", "--concurrency", "1", "--dataset", str(data)) == (
        "sessions take their prompts from --conversations (or make them); they cannot take "
        "--dataset"
    )


def test_sessions_still_need_a_load() -> None:
    """Sessions need --concurrency (sessions at once) or --rate (sessions/s)."""
    assert refusal("--turns", "2") == "give exactly one of --concurrency or --rate"


def test_bad_conversations_file_names_line_and_field(tmp_path: Path) -> None:
    """A bad conversations file through bench names the file, line and field."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"turns": [{"user": "a"}]}\n{"turns": [{"user": ""}]}\n')
    assert refusal("--conversations", str(path), "--concurrency", "1") == (
        f"{path}:2: turns[0].user must be a non-empty string"
    )


def test_sessions_input_takes_integer_lengths() -> None:
    """sim run passes its lengths as integers; LoadOptions takes them as bench's text."""
    options = LoadOptions.of({"turns": 2, "input_len": 300, "output_len": 20, "rate": "1"})
    assert (options.input_len, options.output_len) == ("300", "20")
    spec = sessions_input(options, ())
    assert spec is not None
    assert spec.sessions[0].turns == (Turn(None, 20, 300),) * 2
    assert (spec.think_time, spec.agent, spec.sessions_per_point) == (Delay(0.0), None, 16)
