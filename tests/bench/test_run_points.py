"""Tests of reading measured points from run directories (servekit.bench.run_points)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.bench.run_points import arrival_of, read_runs
from servekit.cli.main import cli
from servekit.errors import ServekitError
from servekit.results.summary import load_summary

PROFILE = "llama-3.1-70b-4xh100"


def sim_run(out: Path, *load: str) -> None:
    """A small sim run directory of the profile."""
    made = CliRunner().invoke(cli, [
        "sim", "run", "--profile", PROFILE, *load, "--requests-per-point", "6",
        "--input-len", "64", "--output-len", "8", "--out", str(out),
    ])  # fmt: skip
    assert made.exit_code == 0, made.stderr


@pytest.mark.parametrize(
    ("command", "arrival"),
    [
        (["servekit", "bench", "--rate", "2", "--arrival", "gamma:2"], "gamma:2"),
        (["servekit", "bench", "--rate", "2", "--arrival=constant"], "constant"),
        (["servekit", "bench", "--rate", "2"], "poisson"),
        (None, "poisson"),
    ],
)
def test_arrival_process_from_the_command_line(
    tmp_path: Path, command: list[str] | None, arrival: str
) -> None:
    """The open loop's arrival process is bench's --arrival (poisson when not given)."""
    sim_run(tmp_path / "run", "--rate", "2")
    doc = json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8"))
    doc["command"] = command
    assert arrival_of(load_summary(doc)) == arrival


def test_points_carry_their_records_and_load(tmp_path: Path) -> None:
    """Each summary point becomes a RunPoint with its own records, load and lengths."""
    sim_run(tmp_path / "closed", "--concurrency", "1,2")
    sim_run(tmp_path / "open", "--rate", "0.5")
    closed, _ = read_runs([tmp_path / "closed"])
    assert [(p.label, p.concurrency, p.rate_rps) for p in closed] == [
        ("c=1", 1, None), ("c=2", 2, None),
    ]  # fmt: skip
    assert all(len(p.records) == 6 and {r.point for r in p.records} == {p.label} for p in closed)
    assert (closed[0].input_len, closed[0].output_len) == (64, 8)
    training, holdout = read_runs([tmp_path / "closed"], [tmp_path / "open"])
    assert len(training) == 2
    assert [(p.label, p.rate_rps, p.arrival) for p in holdout] == [("rate=0.5", 0.5, "poisson")]


def test_a_run_of_failed_requests_only_is_refused(tmp_path: Path) -> None:
    """A directory whose requests all failed has nothing to fit: one line naming it."""
    sim_run(tmp_path / "run", "--concurrency", "1")
    path = tmp_path / "run" / "records.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line.update(error_kind="http", error="503")
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(ServekitError, match="no point has successful requests with chunk times"):
        read_runs([tmp_path / "run"])
