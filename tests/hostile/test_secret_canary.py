"""The secret canary: with a canary API key and a canary URL password, every command that
takes a server URL runs against a server that echoes them back everywhere, against no
server, and with malformed URLs, and no canary appears in any file it wrote or anything
it printed."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli

pytestmark = pytest.mark.integration
ECHO = Path(__file__).with_name("echo_server.py")
KEY = "sk-canary-KEY-4f7a9c2e"
PASSWORD = "pw-canary/PASS-91b2"  # noqa: S105 - a canary; written %2F-escaped in the URL
QUOTED = PASSWORD.replace("/", "%2F")
USER = "ops"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
# Every form a leak could take: the key, the password as written and decoded, basic auth,
# and the starts of them the echo server's partial mode sends back.
CANARIES = (KEY, PASSWORD, QUOTED, BASIC, KEY[:20], PASSWORD[:12], BASIC[:16])
ECHO_MODES = ["", "escaped", "partial"]
"""The echo server's modes: the credentials whole, JSON-escaped, or their starts only."""
FAST_BENCH = ("--concurrency", "1", "--requests-per-point", "6", "--warmup", "0",
              "--input-len", "8", "--output-len", "4", "--timeout", "5")  # fmt: skip
FAST_VALIDATE = ("--ladder", "1,2", "--timeout", "10", "--long-context-tokens", "64")


def with_password(url: str) -> str:
    """The URL with the canary user and password in it."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{USER}:{QUOTED}@{rest}"


@dataclass(frozen=True)
class Ran:
    """A finished command: exit code and everything it printed."""

    returncode: int
    stdout: str
    stderr: str


def run(cwd: Path, *args: str, key: str | None = None, fresh_process: bool = False) -> Ran:
    """`servekit ARGS` in `cwd` with the key in OPENAI_API_KEY (or no key at all): in this
    process (a traceback is put into stderr), or in a fresh one (its real stdout and stderr:
    also what a library prints or logs)."""
    if fresh_process:
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        env |= {"OPENAI_API_KEY": key} if key is not None else {}
        proc = subprocess.run(
            [sys.executable, "-m", "servekit", *args], cwd=cwd, env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        return Ran(proc.returncode, proc.stdout, proc.stderr)
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, list(args), env={"OPENAI_API_KEY": key})
    finally:
        os.chdir(old)
    crash = ""
    if result.exc_info is not None and not isinstance(result.exception, SystemExit):
        crash = "Traceback (most recent call last):\n" + "".join(
            traceback.format_exception(*result.exc_info)
        )
    return Ran(result.exit_code, result.stdout, result.stderr + crash)


def unescaped(text: str) -> str:
    """`text` with JSON's `\\uXXXX` and `\\/` escapes decoded, at any depth (a canary
    written escaped is still a leak)."""
    for _ in range(4):
        decoded = re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), text)
        decoded = re.sub(r"\\+/", "/", decoded)
        if decoded == text:
            break
        text = decoded
    return text


def canaries_in(text: str) -> list[str]:
    """The canaries in text, plain or JSON-escaped."""
    plain = unescaped(text)
    return [c for c in CANARIES if c in text or c in plain]


def leaks(proc: Ran, root: Path) -> list[str]:
    """Where a canary shows: in the output, or in a file anywhere under root."""
    found = [f"{name}: {c}" for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr))
             for c in canaries_in(text)]  # fmt: skip
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        text = path.read_bytes().decode("utf-8", "replace")
        found += [f"{path.relative_to(root)}: {c}" for c in canaries_in(text)]
    return found


def assert_clean(proc: Ran, root: Path, codes: set[int]) -> None:
    """No canary anywhere, no traceback, an expected exit code."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in codes, proc.stderr
    assert leaks(proc, root) == []


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    """The echo server's base URL (one server for the module)."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(ECHO), str(port)])
    try:
        for _ in range(400):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _mode_url(echo_url: str, mode: str) -> str:
    return f"{echo_url}/{mode}" if mode else echo_url


@pytest.mark.parametrize("mode", ECHO_MODES)
@pytest.mark.parametrize("auth", ["key", "password"])
def test_bench_against_an_echoing_server_leaks_nothing(
    tmp_path: Path, echo_url: str, auth: str, mode: str
) -> None:
    """bench completes its sweep (summary and records written) and neither the records, the
    summary files nor the terminal hold the key or the password the server echoed, whole,
    JSON-escaped or in part."""
    base = _mode_url(echo_url, mode)
    url = base if auth == "key" else with_password(base)
    proc = run(tmp_path, "bench", "--url", url, *FAST_BENCH, "--out", "run",
               key=KEY if auth == "key" else None, fresh_process=True)  # fmt: skip
    assert_clean(proc, tmp_path, {0, 3})
    records = (tmp_path / "run" / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(records) == 6
    assert "[REDACTED]" in (tmp_path / "run" / "records.jsonl").read_text(encoding="utf-8")
    assert "[REDACTED]" in (tmp_path / "run" / "summary.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("mode", ECHO_MODES)
@pytest.mark.parametrize("auth", ["key", "password"])
def test_validate_against_an_echoing_server_leaks_nothing(
    tmp_path: Path, echo_url: str, auth: str, mode: str
) -> None:
    """validate runs every check (exit 3: the echoes are not valid answers) and neither
    validate.json, transcripts.jsonl, --json nor the terminal hold the echoed secrets,
    whole, JSON-escaped (as text that is not JSON carries them) or in part."""
    base = _mode_url(echo_url, mode)
    url = base if auth == "key" else with_password(base)
    key = KEY if auth == "key" else None
    for extra in ((), ("--json",)):
        out = tmp_path / f"out{len(extra)}"
        proc = run(tmp_path, "validate", "--url", url, *FAST_VALIDATE, "--out", str(out), *extra,
                   key=key)  # fmt: skip
        assert_clean(proc, tmp_path, {3})
        assert "[REDACTED]" in (out / "validate.json").read_text(encoding="utf-8")
        assert "[REDACTED]" in (out / "transcripts.jsonl").read_text(encoding="utf-8")


def test_validate_reference_url_with_a_password_leaks_nothing(
    tmp_path: Path, echo_url: str
) -> None:
    """--reference-url with its own user:password@ is accepted as basic auth, and never shown."""
    proc = run(tmp_path, "validate", "--url", with_password(echo_url), *FAST_VALIDATE,
               "--reference-url", with_password(echo_url) + "/", "--out", "v")  # fmt: skip
    assert_clean(proc, tmp_path, {3})


@pytest.mark.parametrize("command", ["bench", "validate"])
def test_url_password_and_api_key_together_are_refused_without_the_secrets(
    tmp_path: Path, echo_url: str, command: str
) -> None:
    """Both credentials at once is a usage error (exit 2) in one line quoting neither."""
    extra = (*FAST_BENCH, "--out", "run") if command == "bench" else FAST_VALIDATE
    proc = run(tmp_path, command, "--url", with_password(echo_url), *extra, key=KEY)
    assert_clean(proc, tmp_path, {2})
    assert proc.stderr.count("\n") == 1
    assert "remove the credentials from --url or unset OPENAI_API_KEY" in proc.stderr


@pytest.mark.parametrize("command", ["bench", "validate"])
@pytest.mark.parametrize("auth", ["key", "password"])
def test_a_server_that_is_down_is_reported_without_the_secrets(
    tmp_path: Path, command: str, auth: str
) -> None:
    """Connection refused: an error (bench) or failed checks (validate), canary-free."""
    dead = f"http://127.0.0.1:{_free_port()}"
    url = dead if auth == "key" else with_password(dead)
    extra = (*FAST_BENCH, "--out", "run") if command == "bench" else ("--out", "v")
    proc = run(tmp_path, command, "--url", url, *extra, key=KEY if auth == "key" else None)
    assert_clean(proc, tmp_path, {1, 3})


@pytest.mark.parametrize(
    "url",
    [
        f"http://{USER}:{QUOTED}@[::1",
        f"http://{USER}:{QUOTED}@127.0.0.1:99999",
        f"http://{USER}:{PASSWORD}@127.0.0.1:8000",  # an unescaped / in the password
        f"ftp://{USER}:{QUOTED}@127.0.0.1/",
        f"{USER}:{QUOTED}@127.0.0.1:8000",
        f"http://{USER}:{QUOTED}@127.0.0.1:8000/v1",
    ],
)
@pytest.mark.parametrize("command", ["bench", "validate"])
def test_a_bad_url_is_a_usage_error_without_the_password(
    tmp_path: Path, command: str, url: str
) -> None:
    """A malformed URL holding a password: exit 2, one line, the password not in it."""
    extra = (*FAST_BENCH, "--out", "run") if command == "bench" else ()
    proc = run(tmp_path, command, "--url", url, *extra)
    assert_clean(proc, tmp_path, {2})
    assert proc.stderr.startswith("servekit: error: --url ")
    assert proc.stderr.count("\n") == 1


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PATCH_DIFF = Path(__file__).parents[1] / "render" / "data" / "pr-python-only.diff"


@pytest.mark.parametrize(
    "url",
    [
        "{echo}/fix.diff",  # %2F-escaped: urllib sees the credentials
        "http://{user}:{password}@127.0.0.1:9/fix.diff",  # an unescaped "/": urllib does not
        "file://{user}:{quoted}@localhost{diff}",  # a file that exists: dry-run wrote it all
        "file://{user}:{password}@localhost{diff}",
        "ftp://{user}:{password}@127.0.0.1/fix.diff",
        "//{user}:{password}@127.0.0.1/fix.diff",
    ],
    ids=["http-escaped", "http-slash", "file-escaped", "file-slash", "ftp", "no-scheme"],
)
def test_image_build_with_a_patch_url_password_leaks_nothing(
    tmp_path: Path, echo_url: str, url: str
) -> None:
    """`image build --dry-run` (a URL from the profile) refuses a patch URL with
    credentials, whatever its scheme and however the password is written: exit 1, and
    neither the message nor a build context (Dockerfile, manifest.json) holds the password."""
    diff = tmp_path / "fix.diff"
    diff.write_bytes(PATCH_DIFF.read_bytes())
    patch_url = url.format(echo=with_password(echo_url), user=USER, password=PASSWORD,
                           quoted=QUOTED, diff=diff)  # fmt: skip
    profile = tmp_path / "canary-patched.yaml"  # the user's own file, outside the scan
    profile.write_text(
        "extends: minimax-m3-mxfp8-8xa800-v0251-patched\n"
        "name: canary-patched\n"
        "engine:\n"
        "  patches:\n"
        f"    - {{name: vllm-pr-49149, url: {json.dumps(patch_url)}}}\n",
        encoding="utf-8",
    )
    work = tmp_path / "work"
    work.mkdir()
    proc = run(work, "image", "build", str(profile), "--dry-run", "--context", "ctx")
    assert_clean(proc, work, {1})
    assert "has user:password@ credentials" in proc.stderr
    assert not (work / "ctx").exists()
