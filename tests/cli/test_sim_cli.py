"""In-process tests of `servekit sim run`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from servekit.analyze.slo import parse_slo
from servekit.bench.store import read_records
from servekit.cli.main import cli


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_sim_run_writes_records_and_summary(tmp_path: Path) -> None:
    """sim run --out writes one record per request and a summary.json valid against
    docs/schemas/summary.schema.json."""
    code, out, err = run(
        "sim", "run", "--profile", "llama-3.1-70b-4xh100", "--concurrency", "1,4",
        "--requests-per-point", "8", "--input-len", "128", "--output-len", "16",
        "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert json.loads((tmp_path / "summary.json").read_text(encoding="utf-8")) == summary
    assert [p["concurrency"] for p in summary["points"]] == [1, 4]
    assert all(p["completed"] == 8 and p["output_tokens"] == 8 * 16 for p in summary["points"])
    records = read_records(tmp_path)
    assert len(records) == 16
    assert all(r.output_tokens == 16 for r in records)
    assert summary["workload"]["simulated"] is True


def test_sim_run_slo_gives_goodput_as_bench_counts_it(tmp_path: Path) -> None:
    """sim run --slo: goodput per point by the one per-request rule (`Slo.met_by`), and the
    SLO's text in the workload."""
    code, out, err = run(
        "sim", "run", "--profile", "llama-3.1-70b-4xh100", "--concurrency", "1,8",
        "--requests-per-point", "16", "--input-len", "128", "--output-len", "16",
        "--slo", "ttft_p99<=1s,tpot_p50<=20ms", "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert summary["workload"]["slo"]["text"] == "ttft_p99<=1s,tpot_p50<=20ms"
    slo = parse_slo("ttft_p99<=1s,tpot_p50<=20ms")
    records = read_records(tmp_path)
    for point in summary["points"]:
        label = f"c={point['concurrency']}"
        mine = [r for r in records if r.point == label]
        assert point["goodput_fraction"] == sum(slo.met_by(r) for r in mine) / len(mine)
    assert {p["goodput_fraction"] for p in summary["points"]} != {None}


def test_sim_run_open_loop_rate() -> None:
    """--rate runs open-loop Poisson points."""
    code, out, _ = run(
        "sim", "run", "--profile", "llama-3.1-70b-4xh100", "--rate", "2",
        "--requests-per-point", "10", "--output-len", "8", "--json",
    )  # fmt: skip
    assert code == 0
    point = json.loads(out)["points"][0]
    assert point["rate_rps"] == 2
    assert point["completed"] == 10


def _open_loop(*extra: str) -> tuple[int, dict[str, object], str]:
    code, out, err = run(
        "sim", "run", "--profile", "llama-3.1-70b-4xh100", "--rate", "2",
        "--requests-per-point", "12", "--output-len", "8", "--json", *extra,
    )  # fmt: skip
    return code, (json.loads(out)["points"][0] if code == 0 else {}), err


def test_sim_run_gamma_and_constant_arrivals() -> None:
    """--arrival gamma:SHAPE and constant run every request, each on its own schedule."""
    code, poisson, err = _open_loop()
    assert code == 0, err
    latencies = {}
    for arrival in ("gamma:0.5", "constant"):
        code, point, err = _open_loop("--arrival", arrival)
        assert code == 0, err
        assert point["rate_rps"] == 2
        assert point["completed"] == 12
        latencies[arrival] = point["latency_s"]
    assert latencies["gamma:0.5"] != poisson["latency_s"]
    assert latencies["constant"] != poisson["latency_s"]


def test_sim_run_rejects_an_unknown_arrival() -> None:
    """An --arrival that is not poisson, constant or gamma:SHAPE is a usage error (exit 2)."""
    code, _, err = _open_loop("--arrival", "gamma:-1")
    assert code == 2
    assert "is not poisson, constant or gamma:SHAPE" in err


def test_sim_run_usage_errors() -> None:
    """Both or neither of --concurrency/--rate, or bad numbers, are usage errors (exit 2)."""
    assert run("sim", "run", "--profile", "llama-3.1-70b-4xh100")[0] == 2
    code, _, err = run("sim", "run", "--profile", "llama-3.1-70b-4xh100", "--concurrency", "a,b")
    assert code == 2
    assert "--concurrency 'a,b' is not a comma-separated list" in err


def test_sim_run_refuses_chunked_prefill_off_below_max_model_len() -> None:
    """--set enable_chunked_prefill=false with the budget below max_model_len is an error
    (exit 1) naming both values, as vLLM refuses to start."""
    code, _, err = run(
        "sim", "run", "--profile", "llama-3.1-70b-4xh100", "--concurrency", "1",
        "--set", "enable_chunked_prefill=false",
    )  # fmt: skip
    assert code == 1
    assert "max_num_batched_tokens 8192 must be at least max_model_len 32768" in err


def test_sim_run_follows_a_batch_size_schedule() -> None:
    """With num_speculative_tokens_per_batch_size [[1,2,3],[3,128,0]] the point at
    concurrency 1 speculates and the one at 8 reports no acceptance (nothing drafted)."""
    code, out, err = run(
        "sim", "run", "--profile", "minimax-m3-mxfp8-8xa800", "--concurrency", "1,8",
        "--requests-per-point", "8", "--input-len", "128", "--output-len", "16", "--json",
        "--set", "speculative.config.num_speculative_tokens_per_batch_size=[[1,2,3],[3,128,0]]",
    )  # fmt: skip
    assert code == 0, err
    one, eight = json.loads(out)["points"]
    assert one["server"]["spec_acceptance_length"] > 1
    assert eight["server"]["spec_acceptance_length"] is None
