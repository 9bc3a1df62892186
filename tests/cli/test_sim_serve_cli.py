"""`servekit sim serve --json` announces where it listens as one JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

pytestmark = pytest.mark.integration


def test_serve_json_announces_the_bound_port() -> None:
    """With --port 0 and --json, stdout gets the real URL, which answers /health."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "servekit", "sim", "serve", "--profile", "llama-3.1-70b-4xh100",
         "--port", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "listening"
        assert ready["url"].startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{ready['url']}/health", timeout=5) as r:  # noqa: S310
            assert r.status == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=10)  # also closes the stdout pipe
