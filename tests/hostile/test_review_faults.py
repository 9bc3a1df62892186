"""Hostile replies and inputs found in review: deep or huge JSON from a server, unbounded
bodies, FIFOs as input files, rich markup and terminal escapes in server text, Markdown
headings from run names, a malformed /v1/models in bench."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from servekit.bench.summary import discover
from servekit.cli.main import cli
from servekit.client.endpoint import Endpoint
from servekit.client.http import BODY_TOO_LARGE, MAX_BODY_BYTES, MAX_MESSAGE_CHARS
from servekit.client.mock import MockRequest, MockResponse, MockTransport
from servekit.errors import EndpointError
from servekit.redaction import Redactor
from servekit.report.document import Section, render_markdown
from servekit.report.tables import points_table
from servekit.validate.runner import CheckResult, _redacted

BASE = "http://127.0.0.1:9"
DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE_NUMBER = b'{"data": [{"id": "m", "max_model_len": ' + b"9" * 5000 + b"}]}"


def _serving(body: bytes, status: int = 200) -> MockTransport:
    async def handler(_request: MockRequest) -> MockResponse:
        return MockResponse(status, "application/json", body)

    return MockTransport(handler)


@pytest.mark.parametrize("body", [DEEP, HUGE_NUMBER], ids=["deep", "huge-number"])
def test_json_no_parser_takes_is_not_json_not_a_traceback(body: bytes) -> None:
    """/v1/models nested 100,000 deep or with a 5000-digit number: `not_json`, and bench's
    discovery says so in one error instead of a RecursionError or ValueError."""
    reply = asyncio.run(Endpoint(BASE, _serving(body)).models())
    assert reply.error_kind == "not_json"
    with pytest.raises(EndpointError, match="not_json"):
        asyncio.run(discover(BASE, {}, transport=_serving(body)))


def test_refusal_bodies_are_bounded_and_one_line() -> None:
    """A 500 whose body is 50 MB of message with terminal escapes: the message kept is one
    printable line of bounded length."""
    message = ("\x1b[2J" + "x" * 100 + "\n") * 500_000
    body = b'{"error": {"message": "' + message.encode("unicode_escape") + b'"}}'
    reply = asyncio.run(Endpoint(BASE, _serving(body, 500)).models())
    assert reply.error_kind == "http_500"
    assert reply.error is not None
    assert len(reply.error) <= MAX_MESSAGE_CHARS
    assert "\x1b" not in reply.error
    assert "\n" not in reply.error


def test_a_body_past_the_bound_is_refused_without_reading_it_all() -> None:
    """A 200 answer larger than MAX_BODY_BYTES is `body_too_large`; /metrics is None."""
    big = b"[" + b"1," * (MAX_BODY_BYTES // 2) + b"1]"
    endpoint = Endpoint(BASE, _serving(big))
    assert asyncio.run(endpoint.models()).error_kind == BODY_TOO_LARGE
    assert asyncio.run(endpoint.metrics()) is None


def test_bench_refuses_a_malformed_model_list() -> None:
    """bench reads /v1/models like validate: a boolean max_model_len is malformed."""
    body = b'{"data": [{"id": "m", "max_model_len": true}]}'
    with pytest.raises(EndpointError, match=r"malformed .*max_model_len is True"):
        asyncio.run(discover(BASE, {}, transport=_serving(body)))


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("flag", ["--dataset", "--tools"])
def test_a_fifo_as_input_file_is_refused_at_once(tmp_path: Path, flag: str) -> None:
    """A FIFO given to --dataset or --tools is a usage error at once (it blocked forever)."""
    fifo = _fifo(tmp_path)
    result = CliRunner().invoke(cli, ["bench", "--url", BASE, "--concurrency", "1",
                                      flag, str(fifo), "--out", str(tmp_path / "run")])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "not a regular file" in result.stderr


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000 + "]" * 100_000, '{"n": ' + "9" * 5000 + "}"],
    ids=["deep", "huge-number"],
)
def test_json_options_no_parser_takes_are_usage_errors(tmp_path: Path, text: str) -> None:
    """--chat-template-kwargs nested 100,000 deep or holding a 5000-digit number: exit 2."""
    result = CliRunner().invoke(cli, ["bench", "--url", BASE, "--concurrency", "1",
                                      "--chat-template-kwargs", text,
                                      "--out", str(tmp_path / "run")])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--chat-template-kwargs is not JSON" in result.stderr
    assert "Traceback" not in result.output


def test_rich_markup_in_a_model_name_is_text() -> None:
    """A server's model id `[/x] [link=...]` is printed as it is, not parsed as markup (an
    unbalanced tag raised MarkupError and hid the run's exit code)."""
    console = Console(record=True, width=200)
    console.print(points_table([], title="bench http://h ([/x] [link=http://e]m[/link])"))
    assert "[/x] [link=http://e]m[/link]" in console.export_text()


def test_markdown_headings_from_run_names_are_literal() -> None:
    """A run directory named with a newline and HTML makes no heading or raw HTML."""
    text = render_markdown("r\n# owned <img src=x>", [Section("b\n<script>", paragraphs=["p"])])
    assert "\n# owned" not in text
    assert "<img" not in text
    assert "<script>" not in text


def test_check_details_are_one_printable_bounded_line() -> None:
    """A check detail quoting model output with escapes and no end: one printable line."""
    result: Any = CheckResult("chat", "pass", "answer \x1b[2J\x07" + "y" * 5000 + "\nz", 0.1)
    clean = _redacted(result, Redactor())
    assert clean.detail.isprintable()
    assert len(clean.detail) <= 1000
