"""Shared simulator fixtures."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from servekit.sim.engine import Engine, EngineLimits
from servekit.sim.model import SimModel
from servekit.sim.params import AcceptanceParams, StepTimeParams

STEP = StepTimeParams(
    base_ms=5.0, hbm_efficiency=0.6, compute_efficiency=0.4, decode_request_ms=0.1
)
ACCEPT = AcceptanceParams(((0.0, (0.8, 0.6, 0.5)), (1.0, (0.6, 0.4, 0.3))))


def tiny_model(num_gpu_blocks: int = 1000, block_size: int = 16) -> SimModel:
    """A small dense model on an A100-like GPU."""
    return SimModel(
        nonexpert_bytes=2e9,
        expert_bytes=0.0,
        num_experts=0,
        top_k=0,
        shared_experts=0,
        flops_per_token=2e9,
        attention_flops_per_ctx_token=1e5,
        kv_bytes_per_token=1e5,
        attended_context_cap=None,
        indexer_bytes_per_token=0.0,
        hbm_bytes_s=2e12,
        peak_flops=3e14,
        num_gpu_blocks=num_gpu_blocks,
        block_size=block_size,
        max_model_len=8192,
    )


@pytest.fixture
def make_engine() -> Callable[..., Engine]:
    """Build a small engine: make_engine(blocks=..., seqs=..., budget=..., k=..., seed=...)."""

    def build(
        blocks: int = 1000, seqs: int = 64, budget: int = 2048, k: int = 0, seed: int = 0
    ) -> Engine:
        return Engine(
            tiny_model(blocks),
            EngineLimits(seqs, budget, k),
            STEP,
            ACCEPT if k else None,
            random.Random(seed),
        )

    return build
