"""servekit bench against the simulator's live server over loopback (real HTTP, real SSE)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

from servekit.bench.requests import plan_requests
from servekit.bench.spec import BenchSpec
from servekit.bench.store import read_records
from servekit.cli.main import cli
from servekit.client.aiohttp_transport import AiohttpTransport
from servekit.client.endpoint import Endpoint

pytestmark = pytest.mark.integration


@pytest.fixture
def server(start_server: Callable[..., tuple[object, str]]) -> str:
    """A live simulator (EAGLE3 profile) at 50x real time."""
    return start_server()[1]


def test_bench_closed_loop_sweep(server: str, tmp_path: Path) -> None:
    """A sweep writes exact records, a summary.json as docs/schemas/README.md defines it, and
    server counters per point."""
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--concurrency", "1,4", "--requests-per-point", "8",
        "--warmup", "1", "--input-len", "64", "--output-len", "24", "--temperature", "0.7",
        "--out", str(tmp_path), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["target"]["model"] == "MiniMax-M3-MXFP8"
    assert summary["target"]["server_version"].startswith("servekit-sim")
    records = read_records(tmp_path)
    assert len(records) == 16
    assert all(r.ok and r.output_tokens == 24 for r in records)
    assert all(r.prompt_tokens == 64 for r in records)
    for point in summary["points"]:
        assert point["completed"] == 8
        client = point["client"]
        assert (client["valid"], client["warnings"]) == (True, [])
        assert 0 < client["cpu_util"] < 1
        assert client["loop_lag_ms_p99"] is not None
        server = point["server"]
        assert server["generation_tokens"] == 8 * 24  # client and server agree
        assert 1.5 <= server["spec_acceptance_length"] <= 4.0
        per_position = server["spec_acceptance_per_position"]
        assert len(per_position) == 3
        assert per_position[0] >= per_position[1] >= per_position[2]
        assert sum(per_position) == pytest.approx(server["spec_acceptance_length"] - 1, abs=1e-3)
    assert max(sum(r.chunk_tokens) for r in records) == 24
    assert any(max(r.chunk_tokens) > 1 for r in records)  # EAGLE3 chunks carry several tokens


def test_bench_open_loop(server: str, tmp_path: Path) -> None:
    """--rate sends on a Poisson schedule and reports latency from the schedule too."""
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--rate", "20", "--requests-per-point", "10", "--warmup", "0",
        "--input-len", "32", "--output-len", "8", "--api", "completions",
        "--out", str(tmp_path), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    point = json.loads(result.stdout)["points"][0]
    assert point["rate_rps"] == 20
    assert point["completed"] == 10
    assert point["latency_from_schedule_s"]["mean"] >= point["latency_s"]["mean"] - 1e-6


def test_bench_stops_when_the_engine_dies(
    tmp_path: Path, start_server: Callable[..., tuple[object, str]]
) -> None:
    """A crash at concurrency 2 fails the point, the dead /health stops the sweep, exit 1."""
    _, url = start_server("--fault", "crash-at-concurrency=2")
    result = CliRunner().invoke(cli, [
        "bench", "--url", url, "--concurrency", "1,4,8", "--requests-per-point", "6",
        "--warmup", "0", "--input-len", "32", "--output-len", "16", "--out", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 1
    assert "stopped answering /health during c=4" in result.stderr
    records = read_records(tmp_path)
    assert sum(1 for r in records if r.ok) == 6  # c=1 all fine
    assert any(r.error_kind in {"stream_cut", "http_500"} for r in records)


def test_bench_unreachable_server(tmp_path: Path) -> None:
    """Nothing listening is one clear line and exit 1."""
    result = CliRunner().invoke(
        cli, ["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "cannot connect to http://127.0.0.1:9: connection refused" in result.stderr


def test_bench_writes_tables_and_goodput(server: str, tmp_path: Path) -> None:
    """summary.csv and summary.md are written; --slo adds goodput per point."""
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--concurrency", "2", "--requests-per-point", "6",
        "--warmup", "0", "--input-len", "32", "--output-len", "16",
        "--slo", "ttft_p99<=100s,e2e_p99<=1000s", "--out", str(tmp_path), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    point = json.loads(result.stdout)["points"][0]
    assert point["goodput_fraction"] == 1.0
    assert point["latency_s"]["ci95"]["mean"][0] <= point["latency_s"]["mean"]
    csv_lines = (tmp_path / "summary.csv").read_text(encoding="utf-8").splitlines()
    assert csv_lines[0].startswith("concurrency,rate_rps,completed,failed,output_tok_s")
    assert csv_lines[1].startswith("2,,6,0,")
    assert "| c=2 |" in (tmp_path / "summary.md").read_text(encoding="utf-8")


def test_bench_bad_slo_is_usage_error(tmp_path: Path) -> None:
    """A malformed --slo is exit 2 naming the part."""
    result = CliRunner().invoke(cli, [
        "bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--slo", "ttft=5",
        "--out", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 2
    assert "'ttft=5': ttft is a time, bounded from above; write <=" in result.stderr


def test_bench_slo_in_the_earlier_form_is_answered_with_the_new_one(tmp_path: Path) -> None:
    """bench's earlier `ttft_ms=500,tpot_ms=50` is refused (exit 2) with one line that
    writes it in the one grammar, before anything is sent."""
    result = CliRunner().invoke(cli, [
        "bench", "--url", "http://127.0.0.1:9", "--concurrency", "1",
        "--slo", "ttft_ms=500,tpot_ms=50,e2e_s=10", "--out", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "servekit: error: --slo 'ttft_ms=500,tpot_ms=50,e2e_s=10' is the earlier bench form "
        "(each request within every bound); write it as --slo "
        "'ttft_p99<=500ms,tpot_p99<=50ms,e2e_p99<=10s' (the same requests count towards goodput)"
    ]


def test_bench_dataset_and_length_distribution(server: str, tmp_path: Path) -> None:
    """--dataset prompts keep their own output lengths; --input-len N:uniform varies prompts."""
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        '{"prompt": "tell me a story", "output_len": 7}\n'
        '{"messages": [{"role": "user", "content": "hello"}], "output_len": 9}\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--concurrency", "2", "--requests-per-point", "6",
        "--warmup", "0", "--dataset", str(data), "--out", str(tmp_path / "a"), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert {r.output_tokens for r in read_records(tmp_path / "a")} == {7, 9}
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--concurrency", "2", "--requests-per-point", "8",
        "--warmup", "0", "--input-len", "64:uniform", "--output-len", "8",
        "--out", str(tmp_path / "b"),
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    prompts = {r.prompt_tokens for r in read_records(tmp_path / "b")}
    assert len(prompts) > 1
    assert all(32 <= p <= 96 for p in prompts)


def test_shared_prefix_prompts(server: str) -> None:
    """--shared-prefix prompts share their start and still hit the exact token length."""
    spec = BenchSpec(server, "MiniMax-M3-MXFP8", "completions", 200, 8, shared_prefix=80)

    async def go() -> list[str]:
        async with aiohttp.ClientSession() as session:
            planned, method = await plan_requests(
                Endpoint(spec.base_url, AiohttpTransport(session)), spec, 5, random.Random(0)
            )
            assert method == "server /tokenize"
            counts = []
            for p in planned:
                async with session.post(
                    f"{server}/tokenize", json={"model": spec.model, "prompt": p.body["prompt"]}
                ) as r:
                    counts.append((await r.json())["count"])
            assert counts == [200] * 5
            return [p.body["prompt"] for p in planned]

    prompts = asyncio.run(go())
    head = prompts[0][:200]
    assert all(p.startswith(head) for p in prompts)
    assert len(set(prompts)) == 5


def test_concurrency_cap_is_not_client_lag(server: str, tmp_path: Path) -> None:
    """Waiting for a --max-concurrency slot is not counted as the client lagging."""
    result = CliRunner().invoke(cli, [
        "bench", "--url", server, "--rate", "400", "--max-concurrency", "2",
        "--requests-per-point", "12", "--warmup", "0", "--input-len", "16",
        "--output-len", "4", "--out", str(tmp_path), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    client = json.loads(result.stdout)["points"][0]["client"]
    assert client["send_lag_ms_p99"] < 10
    assert client["valid"] is True
