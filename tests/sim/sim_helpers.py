"""Helpers the simulator tests share: a small dense model and jittered chunk arrivals."""

from __future__ import annotations

import dataclasses
import random

from servekit.records import RequestRecord
from servekit.sim.model import SimModel


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


def jittered(
    records: list[RequestRecord], spread_ns: int, rng: random.Random
) -> list[RequestRecord]:
    """Each chunk arrival delayed by a uniform 0..spread_ns (API-server jitter; order kept)."""
    out = []
    for r in records:
        times = [t + rng.randrange(spread_ns) for t in r.chunk_ns]
        for i in range(1, len(times)):
            times[i] = max(times[i], times[i - 1] + 1)
        out.append(dataclasses.replace(r, chunk_ns=tuple(times), first_token_ns=times[0]))
    return out
