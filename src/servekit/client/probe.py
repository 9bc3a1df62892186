"""Synchronous probes of a server for sync callers such as `servekit up/status` (shell).

Plain urllib and sockets, no event loop: one bounded call each, and nothing raises on a
network failure (a probe answers None, [] or False).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import urllib.error
import urllib.request
from typing import Any

import orjson

PROBE_TIMEOUT_S = 2.0
"""Connecting and each read of a `/health` or `/v1/models` probe."""
PORT_TIMEOUT_S = 0.5
"""Connecting to a port to see whether something listens on it."""


def health(url: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> int | None:
    """`GET /health`'s status code, or None when nothing (or no HTTP server) answers."""
    try:
        # the URL is http(s), built from the profile's bind host and port
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()  # an HTTP error holds the open response; release its socket
        return int(exc.code)
    except (OSError, ValueError, http.client.HTTPException):
        return None


MAX_MODELS_BYTES = 1024 * 1024
"""The most of a `/v1/models` body read (an entry is a few hundred bytes)."""


def served_models(url: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> list[dict[str, Any]]:
    """`GET /v1/models`'s entries, or [] when it does not answer with the OpenAI shape."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout_s) as response:  # noqa: S310
            document = orjson.loads(response.read(MAX_MODELS_BYTES))
    except (OSError, ValueError, http.client.HTTPException, orjson.JSONDecodeError):
        return []  # a cut body past the bound is not JSON either
    data = document.get("data") if isinstance(document, dict) else None
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def port_in_use(host: str, port: int, *, timeout_s: float = PORT_TIMEOUT_S) -> bool:
    """True when something accepts a TCP connection on host:port."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout_s):
        return True
    return False
