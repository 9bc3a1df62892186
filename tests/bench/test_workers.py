"""--workers, --duration-per-point, --profile, --tools and the run's provenance."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.bench.loops import Share
from servekit.bench.pool import shares, split
from servekit.bench.requests import request_body
from servekit.bench.spec import BenchSpec
from servekit.bench.store import read_records
from servekit.bench.summary import redact_argv
from servekit.cli.main import cli
from servekit.errors import UsageError
from servekit.workload.tools import parse_tools

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


def test_split_is_even_and_complete() -> None:
    """A total splits into parts that differ by at most one and sum to it."""
    assert split(7, 3) == [3, 2, 2]
    assert split(2, 4) == [1, 1, 0, 0]
    assert sum(split(128, 3)) == 128


def test_shares_split_concurrency_schedule_and_cap() -> None:
    """Closed loop splits the concurrency; open loop deals arrivals round-robin and splits
    the cap."""
    closed = shares(Share(open_loop=False, concurrency=5), 2)
    assert [s.concurrency for s in closed] == [3, 2]
    schedule = tuple((i, i * 0.1) for i in range(5))
    open_ = shares(Share(open_loop=True, schedule=schedule, cap=3), 2)
    assert [s.schedule for s in open_] == [schedule[0::2], schedule[1::2]]
    assert [s.cap for s in open_] == [2, 1]
    uncapped = shares(Share(open_loop=True, schedule=schedule), 3)
    assert [s.cap for s in uncapped] == [None, None, None]


def test_redact_argv_hides_url_credentials() -> None:
    """Credentials in a URL argument never reach summary.json, in either option form."""
    argv = ["servekit", "bench", "--url", "http://u:secret@127.0.0.1:1", "--url=http://a:b@h:2"]
    assert redact_argv(argv) == [
        "servekit", "bench", "--url", "http://127.0.0.1:1", "--url=http://h:2",
    ]  # fmt: skip


def test_parse_tools_accepts_function_tools_and_names_bad_files() -> None:
    """A list of named function tools parses; anything else is a usage error naming the file."""
    assert parse_tools(json.dumps(TOOLS), "t.json")[0]["function"]["name"] == "get_weather"
    with pytest.raises(UsageError, match=r"--tools t.json: not JSON"):
        parse_tools("[{", "t.json")
    with pytest.raises(UsageError, match=r"expected a non-empty JSON list of function tools"):
        parse_tools('[{"type": "function", "function": {}}]', "t.json")
    with pytest.raises(UsageError, match=r"expected a non-empty JSON list"):
        parse_tools("[]", "t.json")


def test_request_body_carries_tools() -> None:
    """Chat requests carry the tools with automatic choice."""
    spec = BenchSpec("http://x", "m", tools=tuple(TOOLS))
    body = request_body(spec, "hi", 8)
    assert body["tools"] == TOOLS
    assert body["tool_choice"] == "auto"


@pytest.fixture
def server(start_server: Callable[..., tuple[object, str]]) -> str:
    """A live simulator (EAGLE3 profile) at 50x real time."""
    return start_server()[1]


@pytest.mark.integration
def test_two_workers_closed_loop_merge_records(server: str, tmp_path: Path) -> None:
    """Two processes share one closed loop: every request once, records merged, server and
    client token counts agree."""
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--concurrency", "4", "--requests-per-point", "20",
        "--warmup", "0", "--input-len", "32", "--output-len", "16", "--workers", "2",
        "--out", str(tmp_path), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    point = json.loads(result.stdout)["points"][0]
    records = read_records(tmp_path)
    assert sorted(r.id for r in records) == sorted(f"c=4-{i}" for i in range(20))
    assert all(r.ok and r.output_tokens == 16 for r in records)
    assert point["completed"] == 20
    assert point["client"]["workers"] == 2
    assert point["client"]["valid"], point["client"]["warnings"]
    assert point["server"]["generation_tokens"] == 20 * 16
    assert point["server"]["running_max"] <= 4


@pytest.mark.integration
def test_two_workers_open_loop_keep_the_schedule(server: str, tmp_path: Path) -> None:
    """Arrivals dealt to two processes still leave on one constant schedule."""
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--rate", "40", "--arrival", "constant",
        "--requests-per-point", "12", "--warmup", "0", "--input-len", "16", "--output-len", "4",
        "--workers", "2", "--out", str(tmp_path), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    records = sorted(read_records(tmp_path), key=lambda r: r.scheduled_ns)
    assert len(records) == 12
    gaps = {
        round((b.scheduled_ns - a.scheduled_ns) / 1e6, 3) for a, b in itertools.pairwise(records)
    }
    assert gaps == {25.0}  # 40 requests/s, exactly
    assert all(0 <= r.sent_ns - r.scheduled_ns < 50_000_000 for r in records)


@pytest.mark.integration
def test_duration_per_point_stops_sending(
    start_server: Callable[..., tuple[object, str]], tmp_path: Path
) -> None:
    """No request starts after --duration-per-point; the point ends well before the count."""
    _, url = start_server("--time-scale", "1")
    result = CliRunner().invoke(cli, [
        "bench", "--url", url, "--concurrency", "2", "--requests-per-point", "1000",
        "--duration-per-point", "1.5", "--warmup", "0", "--input-len", "16",
        "--output-len", "8", "--out", str(tmp_path), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    records = read_records(tmp_path)
    assert 2 < len(records) < 1000
    first_sent = min(r.sent_ns for r in records)
    assert max(r.sent_ns for r in records) - first_sent < 1.5e9
    assert json.loads(result.stdout)["workload"]["duration_per_point_s"] == 1.5


@pytest.mark.integration
def test_profile_supplies_model_and_defaults_and_provenance(server: str, tmp_path: Path) -> None:
    """--profile fills the model and lengths; summary.json records the profile, the command
    and the server's model entry; tools go out with every request."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--profile", "minimax-m3-mxfp8-8xa800", "--concurrency", "2",
        "--requests-per-point", "2", "--warmup", "0", "--output-len", "8",
        "--tools", str(tools), "--out", str(tmp_path / "run"), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["target"]["profile"] == "minimax-m3-mxfp8-8xa800"
    assert summary["target"]["model"] == "MiniMax-M3-MXFP8"
    assert summary["target"]["model_info"]["max_model_len"] == 131072
    assert summary["workload"]["input_len"] == 1024  # the profile's bench default
    assert summary["workload"]["tools"] == ["get_weather"]
    assert (
        summary["command"][:3] == ["servekit", "bench", "--url"]
        or summary["command"][0] == "servekit"
    )
    assert all(r.prompt_tokens == 1024 for r in read_records(tmp_path / "run"))


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text(encoding="utf-8").split()] if path.exists() else []


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text(encoding="utf-8").split()[2] != "Z"


@pytest.mark.integration
@pytest.mark.slow
def test_kill_9_of_the_parent_stops_its_workers(
    start_server: Callable[..., tuple[object, str]],
    tmp_path: Path,
    records_waiter: Callable[[Path, int], None],
) -> None:
    """kill -9 of `servekit bench --workers 2` leaves no worker sending load; the records
    written so far all parse."""
    _, url = start_server("--time-scale", "1")
    bench = subprocess.Popen(
        [sys.executable, "-m", "servekit", "bench", "--url", url, "--concurrency", "4",
         "--requests-per-point", "400", "--warmup", "0", "--input-len", "8",
         "--output-len", "16", "--workers", "2", "--out", str(tmp_path / "run")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        records_waiter(tmp_path / "run" / "records.jsonl", 8)
        workers = _children(bench.pid)  # the spawn helper and the two workers
        assert workers, "no worker processes found"
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers)
    finally:
        bench.kill()
    assert len(read_records(tmp_path / "run")) >= 8
