"""`servekit demo --json` as one typed model (core): what the journey found."""

from __future__ import annotations

from typing import Literal

from servekit.results._base import Document
from servekit.results.compare import SpeculativeConfig

DEMO_VERSION: Literal[1] = 1


class PerStreamReach(Document):
    """The highest concurrency whose mean per-stream speed meets the target, per sweep.

    Attributes:
        target_tok_s: the per-stream target (the profile's, else 60 tok/s).
        temperature_0_7: at temperature 0.7 (None when no concurrency meets it).
        temperature_0_0: at temperature 0.0 (None when no concurrency meets it).
    """

    target_tok_s: float
    temperature_0_7: int | None
    temperature_0_0: int | None


class DemoDocument(Document):
    """The demo's findings.

    Attributes:
        table: the simulated sweep beside the deployment's figures, one text line per row
            (the header first), each row labelled fitted or held out.
        recommendation: where EAGLE3 pays, from the compared sweeps (None without advice).
        speculative_config: the vLLM setting that applies it (None when there is none).
        per_stream: the per-stream target's reach.
        report: the HTML report written.
        seconds: the journey's wall time.
    """

    schema_version: Literal[1]
    table: tuple[str, ...]
    recommendation: str | None
    speculative_config: SpeculativeConfig | None
    per_stream: PerStreamReach
    report: str
    seconds: float
