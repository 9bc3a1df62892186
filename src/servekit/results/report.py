"""`servekit report --json` as one typed model (core): the files a report wrote."""

from __future__ import annotations

from typing import Literal

from servekit.results._base import Document

REPORT_VERSION: Literal[1] = 1


class ReportDocument(Document):
    """What `servekit report` wrote.

    Attributes:
        html: report.html (self-contained: plots inlined, model output escaped).
        markdown: report.md.
        plots: one PNG per plot, in the report's order.
    """

    schema_version: Literal[1]
    html: str
    markdown: str
    plots: tuple[str, ...]
