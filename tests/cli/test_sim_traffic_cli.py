"""In-process tests of `servekit sim run` with bench's traffic options: traces, sessions,
agent loops (the Llama profile's engine has 16-token blocks, which divide 512)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.bench.store import read_records
from servekit.cli.main import cli
from servekit.records import RequestRecord
from servekit.workload.traces import implied_hits, load_trace

PROFILE = "llama-3.1-70b-4xh100"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["sim", "run", "--profile", PROFILE, *args])
    return result.exit_code, result.stdout, result.stderr


def mooncake(path: Path, count: int = 12, step_ms: int = 400) -> Path:
    """Even requests share their first two 512-token blocks; no last block is shared."""
    with path.open("w", encoding="utf-8") as f:
        for i in range(count):
            own = [1000 + 10 * i + j for j in range(5)]
            ids = [1, 2, *own[:3]] if i % 2 == 0 else own
            row = {"timestamp": i * step_ms, "input_length": 4 * 512 + 60, "output_length": 8}
            f.write(json.dumps({**row, "hash_ids": ids}) + "\n")
    return path


def by_send(records: list[RequestRecord]) -> list[RequestRecord]:
    return sorted(records, key=lambda r: int(r.id.rpartition("-")[2]))


def test_trace_replay_hits_the_implied_rate(tmp_path: Path) -> None:
    trace_file = mooncake(tmp_path / "t.jsonl")
    out = tmp_path / "run"
    code, stdout, err = run("--trace", str(trace_file), "--out", str(out), "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    trace = load_trace(trace_file.read_text("utf-8"), str(trace_file), "mooncake")
    implied = implied_hits(trace)
    assert sum(implied) == 5 * 2 * 512
    [point] = summary["points"]
    assert point["completed"] == 12
    assert point["server"]["prefix_cache_hits"] == sum(implied)
    assert point["server"]["prefix_cache_queries"] == 12 * (4 * 512 + 60)
    records = by_send(read_records(out))
    assert [r.cached_tokens for r in records] == implied
    assert [r.scheduled_ns for r in records] == [i * 400_000_000 for i in range(12)]
    info = summary["workload"]["trace"]
    assert info["file"] == str(trace_file)
    assert info["format"] == "mooncake"
    assert info["requests"] == 12
    assert info["block_tokens"] == 512
    rate = sum(implied) / (12 * (4 * 512 + 60))
    assert info["implied_hit_rate"] == round(rate, 6)
    # the point's blocks, as bench's: the server's hits equal the implied ones, sends on time
    cache = point["prefix_cache"]
    assert cache["server_hit_tokens"] == sum(implied) == cache["client_cached_tokens"]
    assert cache["server_hit_rate"] == cache["implied_hit_rate"] == round(rate, 6)
    schedule = point["schedule"]
    assert schedule["planned"] == schedule["sent"] == 12
    assert schedule["lag_ms"]["p99"] == 0
    assert schedule["valid"] is True
    assert summary["workload"]["simulated"] is True


def test_trace_window_scale_and_cap(tmp_path: Path) -> None:
    """--trace-start/--trace-duration window the trace, --time-scale 0.5 halves its times,
    --max-requests caps it."""
    trace_file = mooncake(tmp_path / "t.jsonl", count=20, step_ms=1000)
    code, stdout, err = run(
        "--trace", str(trace_file), "--trace-start", "2", "--trace-duration", "10",
        "--time-scale", "0.5", "--max-requests", "6", "--json", "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert code == 0, err
    info = json.loads(stdout)["workload"]["trace"]
    assert info["requests"] == 6
    assert info["time_scale"] == 0.5
    assert info["start_s"] == 2.0
    records = by_send(read_records(tmp_path / "r"))
    assert [r.scheduled_ns for r in records] == [i * 500_000_000 for i in range(6)]


def test_trace_block_tokens_and_jsonl_format(tmp_path: Path) -> None:
    """--trace-block-tokens 256: two shared ids are 512 shared tokens; a jsonl trace without
    hash ids never hits."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i * 500, "input_length": 1000, "output_length": 4,
                        "hash_ids": [7, 8, 100 + i, 200 + i]}) + "\n"
            for i in range(3)
        ),
        "utf-8",
    )  # fmt: skip
    code, stdout, err = run("--trace", str(path), "--trace-block-tokens", "256", "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["points"][0]["server"]["prefix_cache_hits"] == 2 * 2 * 256
    assert summary["workload"]["trace"]["block_tokens"] == 256
    plain = tmp_path / "plain.jsonl"
    plain.write_text(
        "".join(
            json.dumps({"timestamp_s": i * 0.5, "input_len": 600, "output_len": 4}) + "\n"
            for i in range(3)
        ),
        "utf-8",
    )
    code, stdout, err = run("--trace", str(plain), "--trace-format", "jsonl", "--json")
    assert code == 0, err
    assert json.loads(stdout)["points"][0]["server"]["prefix_cache_hits"] == 0


def test_synthetic_sessions(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # a turn-1 history of 269 + 11 role-tag tokens + 40 output = 320, a multiple of 16
    code, stdout, err = run(
        "--turns", "2", "--sessions", "3", "--concurrency", "1,2", "--think-time", "0.5",
        "--input-len", "269", "--output-len", "40", "--out", str(out), "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(stdout)
    assert [p["completed"] for p in summary["points"]] == [6, 6]
    info = summary["workload"]["sessions"]
    assert info["source"] == "synthetic"
    assert info["sessions"] == 3
    assert info["turns_max"] == 2
    assert info["think_time"] == "0.5"
    assert info["agent"] is False
    for point in summary["points"]:
        assert [t["turn"] for t in point["turns"]] == [1, 2]
        assert [t["cached_tokens_mean"] for t in point["turns"]] == [0, (320 - 1) // 16 * 16]
        assert point["sessions"]["sessions"] == point["sessions"]["completed"] == 3
    records = read_records(out)
    second = [r for r in records if r.turn == 2]
    assert len(second) == 6
    assert all(r.cached_tokens == (320 - 1) // 16 * 16 for r in second)
    assert len({(r.point, r.session) for r in records}) == 6
    assert all(r.session_end == "completed" for r in second)


def test_conversations_file_and_open_loop(tmp_path: Path) -> None:
    path = tmp_path / "conv.jsonl"
    rows = [
        {"id": "a", "system": "Be brief.", "turns": [{"user": "What is paging?", "output_len": 12},
                                                      {"user": "And blocks?", "output_len": 12}]},
        {"id": "b", "turns": [{"user": "Hello there", "output_len": 12}]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    code, stdout, err = run(
        "--conversations", str(path), "--rate", "2", "--sessions", "2", "--json",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["workload"]["sessions"]["source"] == f"jsonl {path}"
    records = read_records(tmp_path / "r")
    assert sorted((r.session, r.turn) for r in records) == [("a", 1), ("a", 2), ("b", 1)]
    assert {r.session: r.session_end for r in records if r.session_end} == {
        "a": "completed", "b": "completed"
    }  # fmt: skip


def test_agent_loops(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS), "utf-8")
    code, stdout, err = run(
        "--agent", "--tools", str(tools), "--turns", "2", "--agent-turns", "3",
        "--tool-latency", "0.2", "--tool-result", '{"temp_c": 20}', "--sessions", "2",
        "--concurrency", "2", "--input-len", "100", "--output-len", "30", "--json",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert code == 0, err
    info = json.loads(stdout)["workload"]["sessions"]
    assert info["agent"] is True
    assert info["tool_latency"] == "0.2"
    assert info["turns_max"] == 3
    sessions = json.loads(stdout)["points"][0]["sessions"]
    assert sessions["turn_limit"] == 2
    assert sessions["tool_calls"] == 4
    assert sessions["tool_args_invalid"] == 0
    records = read_records(tmp_path / "r")
    for session in ("s1", "s2"):
        mine = sorted((r for r in records if r.session == session), key=lambda r: r.turn or 0)
        assert [r.tool_calls for r in mine] == [1, 0, 1]
        assert [r.finish_reason for r in mine] == ["tool_calls", "length", "tool_calls"]
        assert mine[1].sent_ns == mine[0].end_ns + 200_000_000
        assert mine[-1].session_end == "turn_limit"


def test_same_seed_same_records(tmp_path: Path) -> None:
    args = ("--turns", "3", "--sessions", "4", "--concurrency", "2", "--think-time",
            "1:exponential", "--input-len", "64", "--output-len", "8")  # fmt: skip
    for name in ("a", "b"):
        code, _, err = run(*args, "--out", str(tmp_path / name))
        assert code == 0, err
    assert read_records(tmp_path / "a") == read_records(tmp_path / "b")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "2"], "--trace sets the send times"),
        (["--turns", "2"], "--trace replays single requests"),
        (["--trace-format", "azure"], "t.jsonl"),
        (["--input-len", "100"], "--trace gives every request's lengths"),
    ],
)
def test_bad_trace_input(tmp_path: Path, args: list[str], message: str) -> None:
    trace_file = mooncake(tmp_path / "t.jsonl")
    code, _, err = run("--trace", str(trace_file), *args)
    assert code != 0
    assert message in err
    assert "Traceback" not in err


def test_bad_trace_file_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}'
    path.write_text(good + '\n{"timestamp": 5, "output_length": 2, "hash_ids": [1]}\n', "utf-8")
    code, _, err = run("--trace", str(path))
    assert code != 0
    assert f"{path}:2" in err
    assert "input_length" in err


def _session_error(tmp_path: Path, *args: str) -> str:
    code, _, err = run(*args)
    assert code != 0
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "--concurrency", "1"], "--agent needs tools"),
        (["--turns", "2", "--think-time", "soon", "--concurrency", "1"], "--think-time"),
        (["--sessions", "3", "--concurrency", "1"], "--sessions counts sessions"),
        (["--turns", "2"], "give exactly one of --concurrency or --rate"),
    ],
)
def test_bad_session_input(tmp_path: Path, args: list[str], message: str) -> None:
    assert message in _session_error(tmp_path, *args)


def test_a_history_past_max_model_len_fails_the_session(tmp_path: Path) -> None:
    """A session whose history outgrows max_model_len fails as a live server's 400 would."""
    code, stdout, err = run(
        "--turns", "3", "--sessions", "1", "--concurrency", "1", "--input-len", "300",
        "--output-len", "20", "--set", "serve_args.max_model_len=700", "--out",
        str(tmp_path / "r"), "--json",
    )  # fmt: skip
    assert code == 0, err
    records: list[Any] = sorted(read_records(tmp_path / "r"), key=lambda r: r.turn or 0)
    assert [r.error_kind for r in records] == [None, None, "http_400"]
    assert records[-1].session_end == "failed"
    assert json.loads(stdout)["points"][0]["failed"] == 1
