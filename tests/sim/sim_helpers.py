"""Helpers the simulator tests share: a small dense model, jittered chunk arrivals and
batch-size schedules for dynamic speculative decoding."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import strategies as st

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


@st.composite
def batch_size_schedules(draw: st.DrawFn, max_k: int = 5) -> list[tuple[int, int, int]]:
    """A valid `num_speculative_tokens_per_batch_size`: ranges from batch size 1, with gaps
    between them, k from 0 to max_k (above the engine's k too), in any order."""
    ranges = []
    first = 1
    for _ in range(draw(st.integers(1, 4))):
        last = first + draw(st.integers(0, 12))
        ranges.append((first, last, draw(st.integers(0, max_k))))
        first = last + 1 + draw(st.integers(0, 6))
    return draw(st.permutations(ranges))
