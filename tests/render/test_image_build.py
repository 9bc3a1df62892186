"""Obtaining patch texts for an image build: local paths, file:// URLs and slow servers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.errors import ConfigError
from servekit.runtime.image_build import read_patch

DIFF = "diff --git a/vllm/x.py b/vllm/x.py\n"


def test_relative_path_is_resolved_against_cwd(tmp_path: Path) -> None:
    """A relative url is read from the given current directory, bytes intact (CRLF kept)."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "fix.diff").write_bytes(b"line\r\n")
    assert read_patch("p/fix.diff", cwd=tmp_path) == "line\r\n"


def test_file_url_is_read(tmp_path: Path) -> None:
    """A file:// URL names a local file by absolute path."""
    (tmp_path / "fix.diff").write_text(DIFF, encoding="utf-8")
    assert read_patch(f"file://{tmp_path}/fix.diff", cwd=Path("/")) == DIFF


def test_unsupported_scheme_is_refused(tmp_path: Path) -> None:
    """Only http(s), file:// and plain paths are patch sources."""
    with pytest.raises(ConfigError, match="unsupported scheme ftp"):
        read_patch("ftp://example.invalid/fix.diff", cwd=tmp_path)


def test_non_utf8_patch_is_refused(tmp_path: Path) -> None:
    """A patch that is not UTF-8 text is an error naming it."""
    (tmp_path / "fix.diff").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"patch fix\.diff is not UTF-8"):
        read_patch("fix.diff", cwd=tmp_path)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that accepts connections and never answers; yields a URL on it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/49149.diff"


@pytest.mark.integration
def test_download_times_out_with_the_fix(silent_server: str, tmp_path: Path) -> None:
    """A server that never answers fails after the timeout, naming the URL and the fix."""
    with pytest.raises(ConfigError) as raised:
        read_patch(silent_server, cwd=tmp_path, timeout_s=0.3)
    message = str(raised.value)
    assert silent_server in message
    assert "download it yourself and set the patch's url to the local file" in message


@pytest.mark.parametrize(
    "url", ["http://ops:hunter2@127.0.0.1:9/fix.diff", "https://ops:hun/ter2@127.0.0.1:9/f.diff"]
)
def test_patch_url_with_credentials_is_refused_without_them(url: str, tmp_path: Path) -> None:
    """urllib sends no user:password@ (and its errors quote them): refused, masked, with the fix."""
    with pytest.raises(ConfigError) as raised:
        read_patch(url, cwd=tmp_path, timeout_s=0.3)
    message = str(raised.value)
    assert "hunter2" not in message
    assert "hun/" not in message
    assert "***@127.0.0.1:9/" in message
    assert "has user:password@ credentials" in message
