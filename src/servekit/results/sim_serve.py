"""`servekit sim serve --json`'s announcement as one typed model (core): one JSON line on
stdout once the server listens, with the port it bound (useful with --port 0)."""

from __future__ import annotations

from typing import Literal

from servekit.results._base import Document

SIM_SERVE_VERSION: Literal[1] = 1


class ListeningEvent(Document):
    """The simulator listens.

    Attributes:
        event: always "listening".
        profile: the profile simulated.
        url: the base URL with the bound port, e.g. http://127.0.0.1:40123.
    """

    schema_version: Literal[1]
    event: Literal["listening"]
    profile: str
    url: str
