"""Engine startup stages from log lines (core): what `servekit up` shows while vLLM loads.

A vLLM start goes through: process up, weights loading, memory profiling (and
torch.compile warm-up), KV cache sizing, CUDA-graph capture (skipped with
--enforce-eager and on the CPU build), then the API server starts. Stages only move
forward; a line that belongs to an earlier stage (another rank's copy) is ignored.
Matching is on message text, never on `[file.py:123]`, which moves between releases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["STAGES", "STAGE_LABELS", "StageTracker"]

STAGES: tuple[str, ...] = ("starting", "weights", "profiling", "kv_cache", "graphs", "ready")
"""Stage names in order."""

STAGE_LABELS: dict[str, str] = {
    "starting": "starting the engine",
    "weights": "loading weights",
    "profiling": "profiling memory and compiling",
    "kv_cache": "sizing the KV cache",
    "graphs": "capturing CUDA graphs",
    "ready": "API server up",
}
"""What each stage is, for people."""

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "weights",
        re.compile(
            r"Starting to load model|Loading weights took|Loading safetensors checkpoint shards"
            r"|Model loading took"
        ),
    ),
    (
        "profiling",
        re.compile(
            r"Memory profiling takes|Initial profiling/warmup run|Warming up model"
            r"|torch\.compile takes|Profiling CUDA graph memory|Estimated CUDA graph memory"
        ),
    ),
    (
        "kv_cache",
        re.compile(r"Available KV cache memory|(?:GPU|CPU|XPU) KV cache size:"),
    ),
    ("graphs", re.compile(r"Capturing CUDA graphs|Graph capturing finished")),
    (
        "ready",
        re.compile(r"Application startup complete|Starting vLLM (?:API )?server\b.{0,40}on http"),
    ),
)


@dataclass(slots=True)
class StageTracker:
    """Follows log lines and reports each stage the first time the start reaches it."""

    stage: str = "starting"

    def feed(self, line: str) -> list[str]:
        """Return the stages this line moves the start into (usually none or one).

        A jump (e.g. a log without graph capture going from KV cache to ready) returns
        only the stage reached, never the skipped ones.
        """
        index = STAGES.index(self.stage)
        reached = index
        for name, pattern in _PATTERNS:
            position = STAGES.index(name)
            if position > reached and pattern.search(line):
                reached = position
        if reached == index:
            return []
        self.stage = STAGES[reached]
        return [self.stage]

    def mark_ready(self) -> bool:
        """Record readiness from /health; True when this is news."""
        if self.stage == "ready":
            return False
        self.stage = "ready"
        return True
