"""Shared simulator fixtures; `sim_helpers` (a small model, record jitter) is importable."""

from __future__ import annotations

import dataclasses
import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servekit.sim.engine import Engine, EngineLimits
from servekit.sim.params import AcceptanceParams, StepTimeParams

STEP = StepTimeParams(
    base_ms=5.0, hbm_efficiency=0.6, compute_efficiency=0.4, decode_request_ms=0.1
)
ACCEPT = AcceptanceParams(((0.0, (0.8, 0.6, 0.5)), (1.0, (0.6, 0.4, 0.3))))

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from sim_helpers import tiny_model  # noqa: E402


@pytest.fixture
def make_engine() -> Callable[..., Engine]:
    """Build a small engine: make_engine(blocks=..., seqs=..., budget=..., k=..., seed=...),
    and lookup=... (dynamic_sd_lookup), chunked=False, acceptance=... (ACCEPT if k)."""

    def build(
        blocks: int = 1000,
        seqs: int = 64,
        budget: int = 2048,
        k: int = 0,
        seed: int = 0,
        *,
        lookup: tuple[int, ...] | None = None,
        chunked: bool = True,
        acceptance: AcceptanceParams | None = None,
        max_model_len: int = 8192,
    ) -> Engine:
        return Engine(
            dataclasses.replace(tiny_model(blocks), max_model_len=max_model_len),
            EngineLimits(seqs, budget, k, lookup, chunked),
            STEP,
            (acceptance or ACCEPT) if k else None,
            random.Random(seed),
        )

    return build
