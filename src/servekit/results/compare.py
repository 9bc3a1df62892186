"""`servekit compare --json` as one typed model (core): per-load deltas and advice."""

from __future__ import annotations

from typing import Literal

from servekit.results._base import Document, RateOrInf

COMPARE_VERSION: Literal[1] = 1
Verdict = Literal["better", "worse", "within noise", "n/a"]


class DeltaBlock(Document):
    """One metric at one load: A, B, B's change in percent and the verdict from B's side;
    a share's change in percentage points (`delta_pp`, what its verdict is judged by) and a
    per-turn figure's turn index (`turn`) where they apply."""

    a: float | None
    b: float | None
    delta_pct: float | None
    verdict: Verdict
    delta_pp: float | None = None
    turn: int | None = None


class CompareRow(Document):
    """One load present in both runs, with every metric's delta (keyed `metric[.stat]`)."""

    load: str
    load_kind: Literal["concurrency", "rate_rps", "trace"]
    load_value: RateOrInf  # trace (a replay's point): the requests A's replay planned
    deltas: dict[str, DeltaBlock]
    # why this load cannot support advice (requests failed, timing not valid), else None
    excluded: str | None = None


class SpeculativeConfig(Document):
    """The vLLM dynamic speculative-decoding setting that enacts the advice."""

    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]]
    note: str


class SpeculationAdvice(Document):
    """When speculation pays, from the run with it against the run without."""

    run: Literal["A", "B"]
    recommendation: str
    enable_up_to_concurrency: float | None
    min_gain_pct: float
    gains_pct: list[tuple[float, float]]
    speculative_config: SpeculativeConfig | None


class PerStreamTarget(Document):
    """The highest concurrency of each run whose mean per-stream speed meets the target."""

    tok_s: float
    A: int | None
    B: int | None


class ComparedRuns(Document):
    """Where the two runs came from."""

    A: str
    B: str


class Comparison(Document):
    """The whole comparison document of `servekit compare`."""

    schema_version: Literal[1]
    points: list[CompareRow]
    crossover: str | None
    speculation: SpeculationAdvice | None = None
    per_stream_target: PerStreamTarget | None = None
    runs: ComparedRuns | None = None
