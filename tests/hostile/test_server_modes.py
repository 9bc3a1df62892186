"""`servekit bench` and `servekit validate` against every hostile server mode (some modes as
subprocesses, the rest in-process through click's runner), and the fixes behind some modes.

Each run is short (c=1, two requests, `--timeout 2`) and happens once per (command, mode);
the tests then read what it left: no traceback, the exit code, the failure classified,
summary.json / validate.json written as strict JSON, every records.jsonl line a valid
record, and the canary API key in no output file nor on the terminal.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hostile_server import MODES

from servekit.bench.scrape import scrape, server_block
from servekit.bench.sizing import APPROXIMATE, sized_prompts
from servekit.bench.spec import BenchSpec
from servekit.cli.main import cli
from servekit.client import endpoint as endpoint_module
from servekit.client.endpoint import Endpoint
from servekit.client.mock import MockRequest, MockResponse, MockTransport
from servekit.records import record_from_json

pytestmark = pytest.mark.integration
SRC = Path(__file__).resolve().parents[2] / "src"
CANARY_KEY = "sk-canary-9f3a1c77e2b54d08"
"""The API key every run sends; it must appear in no output."""
RUN_LIMIT_S = 60  # a hang fails the case instead of the suite

# mode -> (exit code, the error classes of the records)
BENCH: dict[str, tuple[int, set[str]]] = {
    "ok": (0, set()),
    "invalid_json": (3, {"malformed_chunk"}),
    "html": (3, {"wrong_content_type"}),
    "endless_line": (3, {"line_too_long"}),
    "stall_after_first": (3, {"timeout"}),
    "huge_lines": (3, {"line_too_long"}),
    "usage_nan": (3, {"malformed_chunk"}),
    "usage_negative": (3, {"invalid_usage"}),
    "usage_bool": (3, {"invalid_usage"}),
    "usage_huge": (3, {"invalid_usage"}),
    "usage_contradictory": (3, {"invalid_usage"}),
    "duplicate_done": (3, {"malformed_chunk"}),
    "missing_done": (3, {"stream_cut"}),
    "broken_tool_json": (0, set()),  # bench offers no tools: a call is just tokens
    "wrong_content_type": (3, {"wrong_content_type"}),
    "http_429": (3, {"http_429"}),
    "http_503": (3, {"http_503"}),
    "slowloris": (3, {"timeout"}),
    "reset_headers": (3, {"stream_cut"}),
    "metrics_nan": (0, set()),
    "metrics_utf8": (0, set()),
    "stall_tokenize": (0, set()),
    "echo_credentials": (0, set()),
    "dead": (1, set()),  # refused before any request
}
# modes in which the server is fit to serve as far as validate checks (else exit 3)
VALIDATE_PASSES = {"ok", "metrics_nan", "metrics_utf8", "stall_tokenize"}


@dataclass(frozen=True)
class Run:
    """What one command left: exit code, terminal output and its output directory."""

    code: int
    stdout: str
    stderr: str
    out: Path
    elapsed_s: float = 0.0


SUBPROCESS = {"ok", "dead", "reset_headers", "metrics_nan", "endless_line", "echo_credentials",
              "stall_after_first", "slowloris", "stall_tokenize"}  # fmt: skip
"""Modes run as real `servekit` processes (a few at once: most of such a run is waiting);
the others run in this process through click's runner, which is much cheaper."""
PARALLEL = 4


STALLED_TOKENIZE_TIMEOUT = "60"
"""bench's --timeout against stall_tokenize: far past /tokenize's own 10 s deadline, so a
run that ends in well under it shows that deadline (not --timeout) cut the stall."""


def _argv(command: str, mode: str, url: str, out: Path, extra: tuple[str, ...]) -> list[str]:
    argv = [command, "--url", f"{url}/m/{mode}"]
    if command == "bench":
        timeout = STALLED_TOKENIZE_TIMEOUT if mode == "stall_tokenize" else "2"
        argv += ["--concurrency", "1", "--requests-per-point", "2", "--warmup", "0",
                 "--input-len", "8", "--output-len", "4", "--timeout", timeout]  # fmt: skip
    else:
        argv += ["--ladder", "1", "--timeout", "2"]
    return [*argv, *extra, "--out", str(out)]


def run(command: str, mode: str, url: str, root: Path, *extra: str) -> Run:
    """`servekit COMMAND` against MODE in a subprocess (`extra` options after the usual)."""
    out = root / f"{command}-{mode}{'-'.join(extra)}"
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPENAI_API_KEY": CANARY_KEY}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "servekit", *_argv(command, mode, url, out, extra)],
        capture_output=True, text=True, env=env, timeout=RUN_LIMIT_S, check=False,
    )  # fmt: skip
    return Run(done.returncode, done.stdout, done.stderr, out, time.monotonic() - start)


def run_here(command: str, mode: str, url: str, root: Path, *extra: str) -> Run:
    """The same run in this process; an exception that escapes is shown as its traceback."""
    out = root / f"{command}-{mode}{'-'.join(extra)}"
    result = CliRunner(env={"OPENAI_API_KEY": CANARY_KEY}).invoke(
        cli, _argv(command, mode, url, out, extra)
    )
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return Run(result.exit_code, result.stdout, stderr, out)


class Runs:
    """bench and validate against every mode, each run once and read by several tests."""

    def __init__(self, pool: ThreadPoolExecutor, url: str, root: Path) -> None:
        self.url, self.root = url, root
        self.started: dict[tuple[str, str], Future[Run]] = {
            (command, mode): pool.submit(run, command, mode, url, root)
            for mode in sorted(SUBPROCESS)
            for command in ("bench", "validate")
        }
        self.done: dict[tuple[str, str], Run] = {}

    def get(self, command: str, mode: str) -> Run:
        """The run of `command` against `mode`."""
        if (command, mode) in self.started:
            return self.started[command, mode].result()
        if (command, mode) not in self.done:
            self.done[command, mode] = run_here(command, mode, self.url, self.root)
        return self.done[command, mode]


@pytest.fixture(scope="module")
def runs(hostile_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Every run: the subprocess ones start at once in the background."""
    with ThreadPoolExecutor(PARALLEL) as pool:
        yield Runs(pool, hostile_url, tmp_path_factory.mktemp("hostile"))


def strict_json(path: Path) -> Any:
    """The JSON document in `path`, refusing NaN and infinity (which JSON does not have)."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{path.name} holds {name}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def assert_clean_terminal(result: Run) -> None:
    """No traceback, no aiohttp internals, and a failed run ends with one error line."""
    for text in (result.stdout, result.stderr):
        assert "Traceback" not in text
        assert "RawResponseMessage" not in text
        assert "aiohttp" not in text
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("servekit:")]
    assert len(errors) == (0 if result.code == 0 else 1), result.stderr
    if errors:
        assert lines[-1] == errors[0]
        assert errors[0].startswith("servekit: error: ")


def test_every_mode_has_expectations() -> None:
    """The tables below cover every mode of the hostile server, and nothing else."""
    assert set(BENCH) == set(MODES)
    assert set(MODES) >= VALIDATE_PASSES


@pytest.mark.parametrize("mode", sorted(MODES))
def test_bench_mode(mode: str, runs: Runs) -> None:
    """bench exits as expected, classifies every failure and writes valid results."""
    result = runs.get("bench", mode)
    code, kinds = BENCH[mode]
    assert_clean_terminal(result)
    assert result.code == code, result.stderr
    summary = strict_json(result.out / "summary.json")
    lines = (result.out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    records = [record_from_json(line) for line in lines]
    assert {r.error_kind for r in records if r.error_kind} == kinds
    if mode == "dead":
        assert records == []
        assert "no request was sent" in result.stderr
        return
    assert len(records) == 2
    assert summary["points"][0]["completed"] == sum(r.ok for r in records)
    assert all(r.output_tokens >= 0 and r.prompt_tokens >= 0 for r in records)
    if code == 3:
        assert f"2 of 2 requests failed ({kinds.pop()} x2)" in result.stderr
    warnings = summary["points"][0]["client"]["warnings"]
    if mode.startswith("metrics_"):  # a bad /metrics is a warning on the point
        assert any(w.startswith("/metrics") and "server figures" in w for w in warnings)
    if mode == "stall_tokenize":  # sized another way once /tokenize's own deadline passed
        assert summary["workload"]["input_len_method"].startswith("approximate")
        assert result.elapsed_s < 30, result.elapsed_s  # --timeout 60 did not have to


@pytest.mark.parametrize("mode", ["metrics_nan", "metrics_utf8"])
def test_a_metrics_problem_keeps_the_load_in_compare(mode: str, runs: Runs) -> None:
    """A /metrics that cannot be read (NaN, invalid UTF-8) leaves the server figures empty
    with a warning, but the client's timing stays valid: compare keeps the load."""
    out = runs.get("bench", mode).out
    client = strict_json(out / "summary.json")["points"][0]["client"]
    assert client["valid"] is True, client
    compared = CliRunner().invoke(cli, ["compare", str(out), str(out), "--json"])
    assert compared.exit_code == 0, compared.stderr
    (point,) = json.loads(compared.stdout)["points"]
    assert point.get("excluded") is None, point


@pytest.mark.parametrize("mode", sorted(MODES))
def test_validate_mode(mode: str, runs: Runs) -> None:
    """validate exits 0 or 3 as expected, with every check a one-line, classified result."""
    result = runs.get("validate", mode)
    assert_clean_terminal(result)
    assert result.code == (0 if mode in VALIDATE_PASSES else 3), result.stdout
    document = strict_json(result.out / "validate.json")
    checks = document["checks"]
    assert checks
    assert all(c["status"] in {"pass", "fail", "warn", "skip"} for c in checks)
    for check in checks:
        assert "internal error" not in check["detail"]
        assert "RawResponseMessage" not in check["detail"]
        assert "\n" not in check["detail"]
    if result.code == 3:
        assert any(c["status"] == "fail" for c in checks)


@pytest.mark.parametrize(
    ("command", "mode"),
    [(command, mode) for command in ("bench", "validate") for mode in sorted(MODES)],
)
def test_no_secret_in_any_output(command: str, mode: str, runs: Runs) -> None:
    """The API key is in no file the command wrote and not on the terminal, even when the
    server echoes it back."""
    result = runs.get(command, mode)
    leaks = [name for name, text in (("stdout", result.stdout), ("stderr", result.stderr))
             if CANARY_KEY in text]  # fmt: skip
    leaks += [
        str(path.relative_to(result.out))
        for path in sorted(result.out.rglob("*"))
        if path.is_file() and CANARY_KEY.encode() in path.read_bytes()
    ]
    assert leaks == []


def test_failure_rate_allowance(hostile_url: str, tmp_path: Path) -> None:
    """--max-failure-rate 1 accepts a run whose requests all failed (exit 0, summary kept)."""
    result = run_here("bench", "http_429", hostile_url, tmp_path, "--max-failure-rate", "1")
    assert result.code == 0
    assert "servekit: error" not in result.stderr
    assert strict_json(result.out / "summary.json")["points"][0]["errors"] == {"http_429": 2}


def test_over_max_model_len_names_the_fix(hostile_url: str, tmp_path: Path) -> None:
    """Prompts over max_model_len (the server's 400) exit 3 with the fix: shorten the input
    or raise max_model_len."""
    result = run_here("bench", "ok", hostile_url, tmp_path, "--input-len", "5000")
    assert_clean_terminal(result)
    assert result.code == 3
    assert "(context_length x2)" in result.stderr
    assert "shorten the prompts (--input-len" in result.stderr
    assert "max_model_len" in result.stderr


# In-process: the fixes behind some modes, pinned without a subprocess.


async def _stalled_tokenize(request: MockRequest) -> MockResponse:
    """A server whose /tokenize never answers."""
    if request.path == "/tokenize":
        await asyncio.Event().wait()
    return MockResponse.json({})


def test_stalled_tokenize_is_cut_whatever_the_request_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sizing prompts against a stalled /tokenize gives up after the /tokenize deadline,
    also with bench's default --timeout of 600 s, and sizes the prompts another way."""
    monkeypatch.setattr(endpoint_module, "TOKENIZE_TIMEOUT_S", 0.2, raising=False)
    spec = BenchSpec("http://h", "m", input_len=8, timeout_s=600.0)
    server = Endpoint("http://h", MockTransport(_stalled_tokenize))

    async def go() -> tuple[list[str], str]:
        async with asyncio.timeout(5):
            return await sized_prompts(server, spec, [8, 8, 8], random.Random(0))

    prompts, method = asyncio.run(go())
    assert len(prompts) == 3
    assert method == APPROXIMATE


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total NaN\n",
         "non-finite values for vllm:num_preemptions"),
        (b"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc +Inf\n",
         "non-finite values for vllm:kv_cache_usage_perc"),
        (b'vllm:num_requests_running{m="\xff"} 1\n', "not UTF-8"),
        (b"vllm:num_requests_running{{{ 1 2 3\n", "not Prometheus text"),
    ],
)  # fmt: skip
def test_bad_metrics_are_a_named_problem(body: bytes, problem: str) -> None:
    """NaN, infinity, invalid UTF-8 or garbage in /metrics give a snapshot without those
    values and a named problem, and the server block is built from it without raising."""

    async def metrics(request: MockRequest) -> MockResponse:
        return MockResponse(200, "text/plain", body=body)

    async def go() -> Any:
        return await scrape(Endpoint("http://h", MockTransport(metrics)))

    snapshot = asyncio.run(go())
    assert snapshot is not None
    assert snapshot.problem is not None
    assert problem in snapshot.problem
    block = server_block(snapshot, snapshot, snapshot.gauges)
    assert block.preemptions is None
    assert block.kv_cache_usage_max is None
