"""Run directories under careless and unlucky use: a second run into the same --out, SIGTERM,
kill -9 and a torn records line, a second demo into the same directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.bench.resummarize import LAST_POINT_NOTE, RECORDS_ONLY_NOTE, STOPPED_NOTE
from servekit.bench.store import RecordWriter, load_records, read_records
from servekit.cli.main import cli
from servekit.demo import ENTRIES, MARKER, prepare_out
from servekit.errors import ServekitError
from servekit.validate.runner import CHECKS

PROFILE = "minimax-m3-mxfp8-8xa800"
StartServer = Callable[..., tuple["subprocess.Popen[bytes]", str]]


def _sim_run(out: Path, *extra: str) -> Any:
    return CliRunner().invoke(cli, ["sim", "run", "--profile", PROFILE, "--concurrency", "1",
                                    "--requests-per-point", "3", "--output-len", "4",
                                    "--out", str(out), *extra])  # fmt: skip


def _bench(url: str, out: Path, *extra: str, requests: int = 300) -> list[str]:
    return [sys.executable, "-m", "servekit", "bench", "--url", url, "--concurrency", "2,4",
            "--requests-per-point", str(requests), "--warmup", "0", "--input-len", "8",
            "--output-len", "16", "--out", str(out), *extra]  # fmt: skip


def _resummarize(run: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servekit", "bench", "--resummarize", str(run), "--json", *extra],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


# Item 3: results are never replaced without --force.


def test_a_summary_alone_is_not_replaced(tmp_path: Path) -> None:
    """A directory holding only summary.json (records removed, or empty) is refused."""
    (tmp_path / "summary.json").write_text("{}", encoding="utf-8")
    (tmp_path / "records.jsonl").touch()
    with pytest.raises(ServekitError, match=r"already holds a run \(summary.json exists\)"):
        RecordWriter(tmp_path)
    assert (tmp_path / "summary.json").read_text(encoding="utf-8") == "{}"


def test_sim_run_refuses_then_force_replaces(tmp_path: Path) -> None:
    """`sim run --out` into a finished run: exit 1 naming the file and --force, the old
    results untouched; with --force the run is replaced (no records mixed)."""
    out = tmp_path / "run"
    assert _sim_run(out).exit_code == 0
    before = (out / "summary.json").read_bytes()
    (out / "records.jsonl").write_text("", encoding="utf-8")  # only summary.json guards now
    refused = _sim_run(out, "--seed", "3")
    assert refused.exit_code == 1
    assert "summary.json exists" in refused.stderr
    assert "pass --force to replace it, or choose another --out directory" in refused.stderr
    assert (out / "summary.json").read_bytes() == before
    replaced = _sim_run(out, "--seed", "3", "--force")
    assert replaced.exit_code == 0, replaced.stderr
    assert len(read_records(out)) == 3


def test_bench_refuses_before_contacting_the_server(tmp_path: Path) -> None:
    """bench into a directory with summary.json fails at once, before any connection (the
    URL is a closed port), and leaves the file as it was."""
    (tmp_path / "summary.json").write_text('{"mine": 1}', encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--out",
              str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "already holds a run (summary.json exists)" in result.stderr
    assert (tmp_path / "summary.json").read_text(encoding="utf-8") == '{"mine": 1}'


def test_validate_refuses_an_existing_validate_json(tmp_path: Path) -> None:
    """validate --out with a validate.json there is refused before any check runs."""
    (tmp_path / "validate.json").write_text('{"old": true}', encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["validate", "--url", "http://127.0.0.1:9", "--out", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "validate.json exists" in result.stderr
    assert "--force" in result.stderr
    assert (tmp_path / "validate.json").read_text(encoding="utf-8") == '{"old": true}'


# Items 4 and 19: torn lines, SIGTERM, kill -9, --resummarize.


def _torn(tmp_path: Path, tail: bytes) -> Path:
    good = json.dumps({"id": "a", "point": "c=1", "scheduled_ns": 0, "sent_ns": 0,
                       "first_token_ns": None, "first_answer_ns": None, "end_ns": 1})  # fmt: skip
    (tmp_path / "records.jsonl").write_bytes((good + "\n").encode() * 2 + tail)
    return tmp_path


def test_a_torn_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    """A last line cut short (no newline) is dropped and counted; strict reading refuses it."""
    read = load_records(_torn(tmp_path, b'{"id": "b", "point": "c=1", "sched'))
    assert len(read.records) == 2
    assert read.dropped == 1
    with pytest.raises(ServekitError, match=r"records.jsonl:3: not a valid request record"):
        read_records(tmp_path)


def test_a_torn_line_in_the_middle_is_an_error_naming_it(tmp_path: Path) -> None:
    """A bad line that is not the last one is an error naming its line number."""
    _torn(tmp_path, b'{"id": "b", "poi\n{"id": "c"}\n')
    with pytest.raises(ServekitError, match=r"records.jsonl:3: not a valid request record"):
        load_records(tmp_path)


def test_report_skips_a_torn_last_line_with_a_warning(tmp_path: Path) -> None:
    """report on a run whose records end in a torn line writes the report and warns once,
    in one line, instead of a pydantic dump."""
    run = tmp_path / "run"
    assert _sim_run(run).exit_code == 0
    with (run / "records.jsonl").open("ab") as f:
        f.write(b'{"id": "x", "point": "c=1", "scheduled_ns": 12')
    result = CliRunner().invoke(cli, ["report", str(run), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"servekit: warning: {run / 'records.jsonl'}: dropped 1 torn last line (the run was "
        "stopped while writing it)"
    ]


def test_report_without_summary_points_to_resummarize(tmp_path: Path) -> None:
    """A run directory with records but no summary.json names the command that rebuilds it."""
    _torn(tmp_path, b"")
    result = CliRunner().invoke(cli, ["compare", str(tmp_path), str(tmp_path)])
    assert result.exit_code == 1
    assert f"servekit bench --resummarize {tmp_path}" in result.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_sigterm_keeps_records_and_summary(
    tmp_path: Path, start_server: StartServer, records_waiter: Callable[[Path, int], None]
) -> None:
    """SIGTERM mid-sweep (docker stop): exit 143, the summary covers every record, the point
    says it was stopped by SIGTERM, and --resummarize rebuilds the same summary."""
    _, url = start_server()
    out = tmp_path / "run"
    bench = subprocess.Popen(_bench(url, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    records_waiter(out / "records.jsonl", 20)
    bench.send_signal(signal.SIGTERM)
    _, err = bench.communicate(timeout=30)
    assert bench.returncode == 143, err.decode()
    assert b"stopped by SIGTERM" in err
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    point = summary["points"][0]
    assert point["completed"] + point["failed"] == len(read_records(out)) > 0
    assert point["client"] == {
        "valid": False,
        "warnings": ["stopped by SIGTERM: the point did not finish"],
    }
    assert _resummarize(out).returncode == 1  # the summary is there: not replaced
    rebuilt = _resummarize(out, "--force")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout) == summary


@pytest.mark.integration
@pytest.mark.parametrize(("sig", "code", "how"), [(signal.SIGTERM, 143, "SIGTERM"),
                                                 (signal.SIGINT, 130, "Ctrl-C")],
                         ids=["SIGTERM", "Ctrl-C"])  # fmt: skip
def test_a_stopped_validate_keeps_the_checks_that_finished(
    tmp_path: Path, hostile_url: str, sig: signal.Signals, code: int, how: str
) -> None:
    """SIGTERM or Ctrl-C while a check runs (here long_context, on a /tokenize that never
    answers): validate.json holds the finished checks, the running one failed as stopped,
    the rest skipped; one error line, the signal's exit code."""
    out = tmp_path / "validate"
    argv = [sys.executable, "-m", "servekit", "validate", "--url",
            f"{hostile_url}/m/stall_tokenize", "--timeout", "60", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # one line per check as it is decided
        seen.append(line)
        if " tool_calls: " in line:  # long_context, the next check, now waits on /tokenize
            break
    proc.send_signal(sig)
    rest = proc.communicate(timeout=60)[1]
    err = "".join(seen) + rest
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert rest.strip().splitlines()[-1].startswith(f"servekit: error: validate stopped by {how}")
    doc = json.loads((out / "validate.json").read_text(encoding="utf-8"))
    checks = {c["name"]: (c["status"], c["detail"]) for c in doc["checks"]}
    assert list(checks) == [name for _, name, _ in CHECKS]
    assert checks["tool_calls"][0] == "pass"
    assert checks["long_context"] == ("fail", f"stopped by {how} before it finished")
    assert checks["ladder"] == ("skip", f"not run: stopped by {how}")
    assert doc["passed"] is False


@pytest.mark.integration
@pytest.mark.slow
def test_kill_9_then_resummarize_with_a_torn_line(
    tmp_path: Path, start_server: StartServer, records_waiter: Callable[[Path, int], None]
) -> None:
    """kill -9 leaves no summary.json; --resummarize rebuilds it from run.json and the
    records, skipping a torn last line with a warning, and report then works."""
    _, url = start_server()
    out = tmp_path / "run"
    bench = subprocess.Popen(_bench(url, out), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    records_waiter(out / "records.jsonl", 20)
    os.kill(bench.pid, signal.SIGKILL)
    bench.wait(timeout=10)
    assert not (out / "summary.json").exists()
    with (out / "records.jsonl").open("ab") as f:
        f.write(b'{"id": "c=2-999", "point": "c=2", "sent')
    records = load_records(out).records
    done = _resummarize(out)
    assert done.returncode == 0, done.stderr
    assert "dropped 1 torn last line" in done.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert json.loads(done.stdout) == summary
    assert summary["target"]["url"] == url
    assert summary["workload"]["input_len"] == 8
    point = summary["points"][0]
    assert point["concurrency"] == 2
    assert point["completed"] + point["failed"] == len(records)
    assert point["client"] == {"valid": False, "warnings": [STOPPED_NOTE]}
    report = CliRunner().invoke(cli, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.stderr


@pytest.mark.integration
def test_resummarize_matches_the_live_summary(tmp_path: Path, start_server: StartServer) -> None:
    """A finished run: delete summary.json, --resummarize; every field is what the live run
    wrote (server metrics and client checks come from run.json)."""
    _, url = start_server()
    out = tmp_path / "run"
    subprocess.run(_bench(url, out, "--slo", "ttft_p99<=500ms", requests=6), check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    live = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    (out / "summary.json").unlink()
    done = _resummarize(out)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == live
    assert [p["concurrency"] for p in live["points"]] == [2, 4]
    assert live["points"][0]["server"]["kv_cache_usage_max"] is not None


def _records_only_run(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A two-point run (c=1, rate=2) reduced to its records.jsonl, ending in a torn line;
    with the summary the run wrote."""
    run, opened = tmp_path / "run", tmp_path / "open"
    assert _sim_run(run).exit_code == 0
    opened_run = CliRunner().invoke(cli, ["sim", "run", "--profile", PROFILE, "--rate", "2",
                                          "--requests-per-point", "3", "--output-len", "4",
                                          "--out", str(opened)])  # fmt: skip
    assert opened_run.exit_code == 0, opened_run.stderr
    live = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    live["points"] += json.loads((opened / "summary.json").read_text(encoding="utf-8"))["points"]
    for name in ("summary.json", "summary.csv", "summary.md", "run.json"):
        (run / name).unlink(missing_ok=True)
    with (run / "records.jsonl").open("ab") as f:
        f.write((opened / "records.jsonl").read_bytes())
        f.write(b'{"id": "rate=2-9", "point": "rate=2", "sent')
    return run, live


def test_resummarize_from_records_alone(tmp_path: Path) -> None:
    """Without run.json --resummarize rebuilds the summary from records.jsonl alone: the
    points' loads from their labels, their figures from the records, a torn last line
    skipped; the warning says what could not be known and the summary lists it."""
    run, live = _records_only_run(tmp_path)
    done = CliRunner().invoke(cli, ["bench", "--resummarize", str(run), "--json"])
    assert done.exit_code == 0, done.stderr
    warnings = done.stderr.strip().splitlines()
    assert warnings[0] == (f"servekit: warning: {run / 'records.jsonl'}: dropped 1 torn last "
                           "line (the run was stopped while writing it)")  # fmt: skip
    assert warnings[1].startswith(f"servekit: warning: {run} has no run.json: the summary is "
                                  "rebuilt from records.jsonl alone; not known: ")  # fmt: skip
    assert len(warnings) == 2
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert json.loads(done.stdout) == summary
    assert [(p["concurrency"], p["rate_rps"]) for p in summary["points"]] == [(1, None), (None, 2)]
    for rebuilt, measured in zip(summary["points"], live["points"], strict=True):
        for key in ("completed", "failed", "output_tokens", "ttft_ms", "itl_ms", "latency_s"):
            assert rebuilt[key] == measured[key], key
    first, last = (p["client"] for p in summary["points"])
    assert first == {"valid": True, "warnings": [RECORDS_ONLY_NOTE]}
    assert last == {"valid": False, "warnings": [RECORDS_ONLY_NOTE, LAST_POINT_NOTE]}
    workload = summary["workload"]
    assert (workload["temperature"], workload["seed"]) == (None, None)
    assert workload["input_len"] == live["workload"]["input_len"]
    assert workload["output_len"] == 4
    assert "mean prompt_tokens" in workload["input_len_method"]
    assert summary["target"] == {"url": None, "model": None, "server_version": None,
                                 "profile": None}  # fmt: skip
    assert any("temperature" in item for item in summary["unknown"])
    assert warnings[1].endswith("; ".join(summary["unknown"]))
    report = CliRunner().invoke(cli, ["report", str(run), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.stderr
    compared = CliRunner().invoke(cli, ["compare", str(run), str(run), "--json"])
    assert compared.exit_code == 0, compared.stderr


def test_sim_fit_refuses_a_summary_rebuilt_from_records_alone(tmp_path: Path) -> None:
    """sim fit needs the run's temperature, which a records-only summary does not know:
    one error line saying so, not a fit on a guessed temperature."""
    run, _ = _records_only_run(tmp_path)
    assert CliRunner().invoke(cli, ["bench", "--resummarize", str(run)]).exit_code == 0
    fit = CliRunner().invoke(cli, ["sim", "fit", str(run), "--profile", PROFILE])
    assert fit.exit_code == 1
    assert "does not say the run's temperature" in fit.stderr


def test_resummarize_without_records_names_the_file(tmp_path: Path) -> None:
    """A directory with neither run.json nor records.jsonl is refused in one line."""
    done = CliRunner().invoke(cli, ["bench", "--resummarize", str(tmp_path)])
    assert done.exit_code == 1
    assert f"{tmp_path} has no records.jsonl" in done.stderr


# Item 17: a second demo into the same directory.


def test_demo_output_is_replaced_only_when_the_demo_wrote_it(tmp_path: Path) -> None:
    """A second demo into its own directory removes the first's output (nothing else);
    a non-empty directory without the marker is refused and left as it was."""
    out = tmp_path / "demo"
    prepare_out(out)
    for name in ENTRIES:
        (out / name).mkdir()
        (out / name / "summary.json").write_text("{}", encoding="utf-8")
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    prepare_out(out)
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "notes.txt"]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "report").mkdir()
    with pytest.raises(ServekitError, match="servekit demo did not write it"):
        prepare_out(foreign)
    assert (foreign / "report").is_dir()


def test_demo_refuses_a_foreign_directory_at_once(tmp_path: Path) -> None:
    """`servekit demo --out` a non-empty directory it did not write fails before any work,
    naming the fix."""
    (tmp_path / "keep.txt").write_text("x", encoding="utf-8")
    result = CliRunner().invoke(cli, ["demo", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "pass --out with a new or empty directory" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
