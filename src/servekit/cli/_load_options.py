"""The traffic options of bench, sim run and tune as one typed value (shell).

`LoadOptions` holds the options as click parsed them: every command fills it from its
keyword arguments (`LoadOptions.of`), and options a command lacks keep their defaults. It
is the only form in which traffic options travel; `servekit.cli._load` turns it into a Load.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.workload.traces import MOONCAKE_BLOCK_TOKENS


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """The traffic options, as click gives them (None: not given)."""

    concurrency: str | None = None
    rate: str | None = None
    arrival: str = "poisson"
    requests_per_point: int | None = None
    input_len: str | None = None
    output_len: str | None = None
    temperature: float = 0.0
    seed: int = 0
    api: str = "chat"
    dataset: Path | None = None
    shared_prefix: int = 0
    tools: Path | None = None
    duration_per_point: float | None = None
    max_concurrency: int | None = None
    warmup: int = 0  # a run setting, read here only to refuse it with sessions
    workers: int = 1  # a run setting, read here only to refuse it with sessions and traces
    conversations: Path | None = None
    turns: int | None = None
    sessions_per_point: int | None = None
    think_time: str = "0"
    agent: bool = False
    agent_turns: int = 8
    tool_latency: str = "0.1"
    tool_result: str = '{"ok": true}'
    trace: Path | None = None
    trace_format: str = "mooncake"
    time_scale: float = 1.0
    trace_start: float = 0.0
    trace_duration: float | None = None
    max_requests: int | None = None
    trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> LoadOptions:
        """The traffic options among a command's keyword arguments (others are ignored;
        sim run's integer lengths become the text bench's lengths are)."""
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in params.items() if k in names}
        for key in ("input_len", "output_len", "concurrency", "rate"):
            if given.get(key) is not None:
                given[key] = str(given[key])
        return cls(**given)
