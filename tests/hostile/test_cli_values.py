"""Hostile option values and files (issue #14 items 13, 15, 18, 19): NaN and infinity for
every float option, `--rate inf`, binary datasets, unwritable output directories, a
server's malformed model list, and errors that are one line with no blank line above."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from servekit.bench.store import read_summary
from servekit.cli.main import COMMANDS, cli
from servekit.client.mock import MockRequest, MockResponse, MockTransport
from servekit.validate.context import ValidateSpec
from servekit.validate.runner import run_checks

PROFILE = "minimax-m3-mxfp8-8xa800"
DEAD_URL = "http://127.0.0.1:9"  # the discard port: nothing listens there


def _commands(group: click.Group, ctx: click.Context) -> Iterator[tuple[list[str], click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            for path, sub in _commands(command, ctx):
                yield [name, *path], sub
        else:
            yield [name], command


def float_options() -> list[tuple[list[str], str]]:
    """Every (command path, option) of the CLI whose values are floats."""
    ctx = click.Context(cli)
    found = []
    for path, command in _commands(cli, ctx):
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(
                param.type, click.types.FloatParamType
            ):
                found.append((path, param.opts[-1]))
    return found


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def test_the_cli_has_float_options_to_check() -> None:
    """The walk over every command finds the float options (bench, sim, plan...)."""
    found = {(" ".join(path), opt) for path, opt in float_options()}
    assert ("bench", "--temperature") in found
    assert ("bench", "--duration-per-point") in found
    assert ("plan", "--non-torch-gib") in found
    assert ("sim run", "--temperature") in found
    assert len(COMMANDS) > 10


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize(
    ("path", "option"), [pytest.param(p, o, id=f"{' '.join(p)} {o}") for p, o in float_options()]
)
def test_every_float_option_refuses_nan_and_infinity(
    path: list[str], option: str, value: str
) -> None:
    """`--temperature nan` and the like: a usage error (exit 2) naming the option, one line."""
    result = CliRunner().invoke(cli, [*path, f"{option}={value}"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("servekit: error: ")
    assert option in lines[0]
    assert "finite" in lines[0]


def test_sim_run_rate_inf_sends_all_at_once_and_writes_strict_json(tmp_path: Path) -> None:
    """`--rate inf` means no pacing: every request is scheduled at the point's start, and
    summary.json holds the string "inf" (never Infinity) and reads back as infinity."""
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        ["sim", "run", "--profile", PROFILE, "--rate", "2,inf", "--requests-per-point", "8",
         "--input-len", "64", "--output-len", "8", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = _strict_json((out / "summary.json").read_text(encoding="utf-8"))
    assert [p["rate_rps"] for p in doc["points"]] == [2.0, "inf"]
    assert read_summary(out).points[1].rate_rps == math.inf
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    burst = [r["scheduled_ns"] for r in records if r["point"] == "rate=inf"]
    assert len(burst) == 8
    assert len(set(burst)) == 1


def test_rate_nan_is_refused_and_inf_elsewhere_too() -> None:
    """NaN is never a rate, and infinity is only a rate: `--concurrency inf` is refused."""
    runner = CliRunner()
    for args in (["--rate", "nan"], ["--rate", "1,nan"], ["--concurrency", "inf"]):
        result = runner.invoke(cli, ["sim", "run", "--profile", PROFILE, *args])
        assert result.exit_code == 2, result.output
        assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [["--slo", "ttft_ms=nan"], ["--slo", "e2e_s=inf"], ["--input-len", "100:normal:inf"]],
)
def test_float_lists_inside_options_refuse_nan(args: list[str], tmp_path: Path) -> None:
    """NaN hidden in --slo or a length distribution is a usage error too, before any request."""
    result = CliRunner().invoke(
        cli, ["bench", "--url", DEAD_URL, "--concurrency", "1", *args, "--out", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("servekit: error: ")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "content",
    [
        os.urandom(4096),
        gzip.compress(b'{"prompt": "hello"}\n' * 100),
        b"[" * 100_000,
        b'{"prompt": "x", "output_len": ' + b"9" * 5000 + b"}\n",
        b"\x00\x00\x00\n",
    ],
    ids=["random-bytes", "gzip", "deep-json", "huge-number", "nul-bytes"],
)
@pytest.mark.parametrize("flag", ["--dataset", "--tools"])
def test_a_binary_or_hostile_dataset_is_one_usage_error(
    flag: str, content: bytes, tmp_path: Path
) -> None:
    """A binary, compressed or absurd --dataset (or --tools) file is one line naming the
    file, no traceback."""
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_bytes(content)
    result = CliRunner().invoke(
        cli,
        ["bench", "--url", DEAD_URL, "--concurrency", "1", flag, str(dataset),
         "--out", str(tmp_path / "run")],
    )  # fmt: skip
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("servekit: error: ")
    assert "prompts.jsonl" in lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--quick", "--out", "/proc/servekit-x"],
        ["validate", "--url", DEAD_URL, "--out", "/proc/servekit-x"],
    ],
    ids=["demo", "validate"],
)
def test_an_unwritable_out_directory_is_one_usage_error(args: list[str]) -> None:
    """`demo --out /proc/x` (and validate's) say the directory cannot be made, no traceback."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr.splitlines() == [
        "servekit: error: cannot create --out '/proc/servekit-x': No such file or directory; "
        "give --out a writable directory"
    ]


def test_an_error_before_any_point_has_no_blank_line_above(tmp_path: Path) -> None:
    """bench against a dead server: the error is the first and only line on stderr."""
    result = CliRunner().invoke(
        cli, ["bench", "--url", DEAD_URL, "--concurrency", "1", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 1
    lines = result.stderr.split("\n")
    assert lines[0].startswith("servekit: error: cannot connect to "), result.stderr
    assert lines[1:] == [""]


AIOHTTP_WORDS = ("Cannot connect to host", "ssl:default", "Connect call failed", "aiohttp")


def test_bench_against_a_closed_port_says_so_in_servekit_words(tmp_path: Path) -> None:
    """bench against a closed port: one line saying it cannot connect, why, and the fix;
    none of aiohttp's wording."""
    result = CliRunner().invoke(
        cli, ["bench", "--url", DEAD_URL, "--concurrency", "1", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 1
    assert result.stderr == (
        f"servekit: error: cannot connect to {DEAD_URL}: connection refused; is the server "
        "running? check --url (host and port)\n"
    )


def test_validate_against_a_closed_port_says_so_in_servekit_words(tmp_path: Path) -> None:
    """validate against a closed port: health fails with servekit's line (in the terminal
    and validate.json), the rest are skipped; none of aiohttp's wording anywhere."""
    out = tmp_path / "v"
    result = CliRunner().invoke(cli, ["validate", "--url", DEAD_URL, "--out", str(out)])
    assert result.exit_code == 3
    checks = {c["name"]: c["detail"] for c in json.loads((out / "validate.json").read_text())
              ["checks"]}  # fmt: skip
    assert checks["health"] == (
        f"/health: cannot connect to {DEAD_URL}: connection refused; is the server running?"
    )
    written = (out / "transcripts.jsonl").read_text(encoding="utf-8")
    for text in (result.stdout, result.stderr, written):
        assert not any(word in text for word in AIOHTTP_WORDS), text


def test_click_usage_errors_are_one_line_too() -> None:
    """An unknown option or a missing argument: `servekit: error: ...; see ... --help`."""
    result = CliRunner().invoke(cli, ["sim", "run"], prog_name="servekit")
    assert result.exit_code == 2
    assert result.stderr == (
        "servekit: error: Missing option '--profile'; see 'servekit sim run --help'\n"
    )


class FakeServer:
    """A chat server whose /v1/models entry and /tokenize counts are given."""

    def __init__(self, entry: dict[str, Any], count: int | None = None) -> None:
        self.entry = entry
        self.count = count

    async def __call__(self, request: MockRequest) -> MockResponse:
        """Answer one request."""
        if request.path == "/health":
            return MockResponse(200)
        if request.path == "/v1/models":
            return MockResponse.json({"object": "list", "data": [self.entry]})
        if request.path == "/tokenize":
            if self.count is None:
                return MockResponse(404)
            return MockResponse.json({"count": self.count})
        if request.path == "/v1/chat/completions":
            doc = {"choices": [{"index": 0, "delta": {"content": "48213"}, "finish_reason": None}]}
            end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            body = (
                b"".join(b"data: " + json.dumps(d).encode() + b"\n\n" for d in (doc, end))
                + b"data: [DONE]\n\n"
            )
            return MockResponse(200, "text/event-stream", body)
        return MockResponse(404)


def _validate(server: FakeServer) -> dict[str, tuple[str, str]]:
    spec = ValidateSpec(base_url="http://fake:8000", only=frozenset({"models", "long_context"}))
    results = asyncio.run(run_checks(spec, transport=MockTransport(server)))
    return {r.name: (r.status, r.detail) for r in results}


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"id": 12345, "max_model_len": 4096}, "data[0].id is 12345"),
        ({"id": "m", "max_model_len": -1}, "data[0].max_model_len is -1"),
        ({"id": "m", "max_model_len": True}, "data[0].max_model_len is True"),
    ],
)
def test_a_malformed_model_list_fails_and_long_context_does_not_pass(
    entry: dict[str, Any], problem: str
) -> None:
    """A non-string model id or a max_model_len of -1 is a malformed server reply: models
    fails saying so, and long_context does not "pass" on a prompt of a few tokens."""
    results = _validate(FakeServer(entry, count=17))
    status, detail = results["models"]
    assert status == "fail"
    assert detail.startswith("malformed /v1/models reply: ")
    assert problem in detail
    assert results["long_context"][0] == "skip"


def test_long_context_fails_when_it_cannot_build_a_long_prompt() -> None:
    """/tokenize that always counts 17 tokens: the long-context check fails honestly
    instead of passing on a 17-token prompt for a 3,686-token target."""
    results = _validate(FakeServer({"id": "m", "max_model_len": 4096}, count=17))
    assert results["models"][0] == "pass"
    status, detail = results["long_context"]
    assert status == "fail"
    assert "17-token prompt for 3686 tokens" in detail


@pytest.mark.integration
def test_bench_rate_inf_sends_the_point_at_once(
    start_server: Callable[..., tuple[object, str]], tmp_path: Path
) -> None:
    """bench --rate inf against the simulator: every request scheduled at the point's
    start, at most --max-concurrency in flight, and rate_rps "inf" in summary.json."""
    _, url = start_server()
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        ["bench", "--url", url, "--rate", "inf", "--max-concurrency", "2",
         "--requests-per-point", "6", "--warmup", "0", "--input-len", "32", "--output-len", "4",
         "--out", str(out), "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = _strict_json((out / "summary.json").read_text(encoding="utf-8"))
    assert doc["points"][0]["rate_rps"] == "inf"
    assert doc["points"][0]["completed"] == 6
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len({r["scheduled_ns"] for r in records}) == 1
    spans = sorted((r["sent_ns"], r["end_ns"]) for r in records)
    assert all(sum(s <= t < e for s, e in spans) <= 2 for t, _ in spans)


TOOL_WITH = (
    '[{{"type": "function", "function": {{"name": "f", "parameters": {{"type": "object", '
    '"properties": {{"x": {{"type": "number", "maximum": {}}}}}}}}}}}]'
)


def _json_option_args(case: str, url: str, constant: str, tmp_path: Path) -> list[str]:
    """The command line of one JSON-valued option holding `constant`, against a live server."""
    tools = tmp_path / "tools.json"
    tools.write_text(TOOL_WITH.format(constant), encoding="utf-8")
    out = str(tmp_path / "out")
    bench = ["bench", "--url", f"{url}/m/ok", "--concurrency", "1", "--requests-per-point",
             "2", "--warmup", "0", "--input-len", "8", "--output-len", "4",
             "--out", out]  # fmt: skip
    return {
        "bench --chat-template-kwargs": [
            *bench, "--chat-template-kwargs", f'{{"enable_thinking": {constant}}}'],
        "validate --thinking-kwargs": [
            "validate", "--url", f"{url}/m/ok", "--thinking-kwargs", f'{{"x": {constant}}}',
            "--out", out],
        "bench --tools": [*bench, "--tools", str(tools)],
        "sim run --tools": [
            "sim", "run", "--profile", PROFILE, "--concurrency", "1", "--agent", "--tools",
            str(tools), "--sessions", "1", "--output-len", "4", "--out", out],
        "tune --tools": [
            "tune", PROFILE, "--agent", "--tools", str(tools), "--slo", "tpot_p50<=9ms",
            "--max-rounds", "1", "--out", out],
    }[case]  # fmt: skip


JSON_OPTIONS = ["bench --chat-template-kwargs", "validate --thinking-kwargs", "bench --tools",
                "sim run --tools", "tune --tools"]  # fmt: skip
"""Every option whose value (or file) is JSON."""


@pytest.mark.integration
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("case", JSON_OPTIONS)
def test_every_json_option_refuses_nan_and_infinity(
    case: str, constant: str, hostile_url: str, tmp_path: Path
) -> None:
    """NaN or an infinity inside a JSON option (Python's parser takes them): a usage error
    (exit 2) naming the option and the constant, one line, before anything is written."""
    result = CliRunner().invoke(cli, _json_option_args(case, hostile_url, constant, tmp_path))
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("servekit: error: ")
    assert case.split()[-1] in lines[0]
    assert f"holds {constant}, which is not a JSON number" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flag", "constant", "text"),
    [
        ("--dataset", "NaN", '{"messages": [{"role": "user", "content": "hi", "w": NaN}]}'),
        ("--conversations", "Infinity", '{"turns": [{"user": "hi"}], "score": Infinity}'),
        ("--trace", "-Infinity", '{"timestamp_s": -Infinity, "input_len": 8, "output_len": 4}'),
    ],
)
def test_json_files_refuse_nan_and_infinity(
    flag: str, constant: str, text: str, tmp_path: Path
) -> None:
    """A JSON file given to an option holding NaN or an infinity (which would be sent to
    the server, or read as a time): one usage line naming the file and its line."""
    path = tmp_path / "input.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    extra = ["--trace-format", "jsonl"] if flag == "--trace" else ["--concurrency", "1"]
    result = CliRunner().invoke(cli, ["bench", "--url", DEAD_URL, flag, str(path), *extra,
                                      "--out", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        f"servekit: error: {path}:1: not JSON (holds {constant}, which is not a JSON number)"
    )
    assert not (tmp_path / "out").exists()


def test_bench_help_names_exit_code_3_and_max_failure_rate() -> None:
    """`bench --help` says when it exits 3 and names --max-failure-rate, the option that
    allows failures (a CI script reads the exit code)."""
    result = CliRunner().invoke(cli, ["bench", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "3 more requests failed than --max-failure-rate allows" in text
    assert "--max-failure-rate FLOAT" in text
    assert "bench exits 3" in text
