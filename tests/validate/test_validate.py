"""servekit validate against the live simulator (faults included) and misbehaving servers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli

pytestmark = pytest.mark.integration
PROFILE = "minimax-m3-mxfp8-8xa800"
BAD = Path(__file__).with_name("bad_server.py")


def _validate(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["validate", *args, "--json"], env=env)
    return result.exit_code, json.loads(result.stdout), result.stderr


def _checks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["checks"]}


def test_every_check_passes_against_the_simulator(
    start_server: Callable[..., tuple[object, str]], tmp_path: Path
) -> None:
    """With the profile, all ten checks pass; validate.json and redacted transcripts stay."""
    _, url = start_server()
    code, doc, err = _validate("--url", url, "--profile", PROFILE, "--out", str(tmp_path),
                               env={"OPENAI_API_KEY": "sk-test-secret-123"})  # fmt: skip
    assert code == 0, err
    checks = _checks(doc)
    assert {n: c["status"] for n, c in checks.items()} == dict.fromkeys(checks, "pass")
    assert len(checks) == 10
    assert "131072" in checks["models"]["detail"]
    assert checks["long_context"]["data"]["prompt_tokens"] == round(131072 * 0.9)
    assert checks["ladder"]["data"]["levels"][-1]["concurrency"] == 16
    assert 1 <= checks["spec_decode"]["data"]["acceptance_length"] <= 4
    assert json.loads((tmp_path / "validate.json").read_text(encoding="utf-8"))["passed"]
    transcripts = (tmp_path / "transcripts.jsonl").read_text(encoding="utf-8")
    assert len(transcripts.splitlines()) > 30
    assert "sk-test-secret-123" not in transcripts
    assert all(json.loads(line)["check"] for line in transcripts.splitlines())


def test_crash_at_concurrency_2_is_diagnosed_from_the_log(
    start_server: Callable[..., tuple[object, str]], tmp_path: Path
) -> None:
    """The ladder fails at 2 with the engine-death diagnosis, the quoted log lines and the
    known issue's fix; exit 3."""
    log = tmp_path / "engine.log"
    with log.open("w", encoding="utf-8") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "servekit", "sim", "serve", "--profile", PROFILE, "--port", "0",
             "--time-scale", "0.02", "--fault", "crash-at-concurrency=2", "--json"],
            stdout=subprocess.PIPE, stderr=sink, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            url = json.loads(proc.stdout.readline())["url"]
            code, doc, _ = _validate("--url", url, "--only", "identity,ladder", "--log", str(log))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
    assert code == 3
    ladder = _checks(doc)["ladder"]
    assert ladder["status"] == "fail"
    assert ladder["detail"].startswith("engine died at concurrency 2: stream reset mid-response")
    assert "/health now 503" in ladder["detail"]
    assert "illegal memory access" in ladder["detail"]
    assert "engine.log:" in ladder["detail"]
    assert "PR #49149" in ladder["detail"]
    assert ladder["data"]["known_issues"][0]["id"] == "m3-topk-layout-triton"
    assert [row["concurrency"] for row in ladder["data"]["levels"]] == [1, 2]


def test_corrupt_at_concurrency_2_names_the_garbage(
    start_server: Callable[..., tuple[object, str]],
) -> None:
    """Garbage with HTTP 200 fails the ladder at 2, naming what was wrong; exit 3."""
    _, url = start_server("--fault", "corrupt-at-concurrency=2")
    code, doc, _ = _validate("--url", url, "--only", "ladder")
    assert code == 3
    detail = _checks(doc)["ladder"]["detail"]
    assert detail.startswith("garbage at concurrency 2 although every response was HTTP 200")
    assert "NUL byte" in detail
    assert "consistent with known issue m3-topk-layout-triton" in detail


def test_wrong_served_name_and_max_model_len_fail(
    start_server: Callable[..., tuple[object, str]],
) -> None:
    """A served name the server does not list, and a max_model_len unlike the profile's,
    fail their checks."""
    _, url = start_server("--set", "max_model_len=65536")
    code, doc, _ = _validate("--url", url, "--profile", PROFILE, "--only", "identity",
                             "--model", "other-model")  # fmt: skip
    assert code == 3
    checks = _checks(doc)
    assert "not 'other-model'" in checks["models"]["detail"]
    assert checks["max_model_len"]["detail"] == (
        "the server has max_model_len 65536, the profile 131072"
    )


@pytest.mark.parametrize(
    ("mode", "detail"),
    [
        ("bad_json", "streaming: malformed_chunk: chunk is not JSON"),
        ("cut", "streaming: stream_cut: connection closed mid-stream"),
        ("wrong_type", "not_json: the body is not JSON"),
        ("http_500", "http_500: boom"),
        ("hang", "no result within 1 s: the server hung"),
    ],
)
def test_misbehaving_servers_fail_the_check_precisely(
    mode: str, detail: str, start_script: Callable[..., Any]
) -> None:
    """Each malformed answer is one failed check with a precise detail, never a traceback."""
    server = start_script(str(BAD), mode)
    code, doc, err = _validate("--url", server.url, "--only", "chat", "--timeout", "1")
    assert code == 3
    assert "Traceback" not in err
    chat = _checks(doc)["chat"]
    assert chat["status"] == "fail"
    assert chat["detail"].startswith(detail), chat["detail"]


def test_wrong_content_type_on_a_stream_is_named(start_script: Callable[..., Any]) -> None:
    """A stream answered as text/html is classified, quoting the body."""
    server = start_script(str(BAD), "wrong_type")
    code, doc, _ = _validate("--url", server.url, "--only", "long-context", "--timeout", "5")
    assert code == 3
    detail = _checks(doc)["long_context"]["detail"]
    assert "wrong_content_type: answered Content-Type 'text/html'" in detail


def test_unreachable_server_fails_health_and_skips_the_rest() -> None:
    """Nothing listening: health fails, the other checks say why they were skipped."""
    code, doc, _ = _validate("--url", "http://127.0.0.1:9")
    assert code == 3
    checks = _checks(doc)
    assert checks["health"]["status"] == "fail"
    assert checks["ladder"]["detail"] == "skipped: the server does not answer"


def test_spec_decode_against_a_reference_without_speculation(
    start_server: Callable[..., tuple[object, str]], start_script: Callable[..., Any]
) -> None:
    """EAGLE3's acceptance length is in [1, k+1] and its greedy outputs equal those of the
    same model without speculation; a reference that answers differently fails the check."""
    _, url = start_server()
    _, plain = start_server("--profile", f"{PROFILE}-no-eagle3")
    code, doc, _ = _validate("--url", url, "--only", "spec-decode", "--reference-url", plain)
    assert code == 0
    check = _checks(doc)["spec_decode"]
    assert check["detail"].endswith("greedy outputs equal the reference's for 4 prompts")
    assert check["data"]["num_speculative_tokens"] == 3
    other = start_script(str(BAD), "fine")
    code, doc, _ = _validate("--url", url, "--only", "spec-decode", "--reference-url", other.url)
    assert code == 3
    assert (
        "4 of 4 greedy outputs differ from the reference" in _checks(doc)["spec_decode"]["detail"]
    )


def test_no_speculation_skips_the_spec_decode_check(
    start_server: Callable[..., tuple[object, str]],
) -> None:
    """A server without spec-decode counters skips the check."""
    _, url = start_server("--profile", f"{PROFILE}-no-eagle3")
    code, doc, _ = _validate("--url", url, "--only", "spec-decode")
    assert code == 0
    assert _checks(doc)["spec_decode"]["status"] == "skip"
