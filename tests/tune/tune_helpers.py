"""Candidates for tune's tests: the built-in M3 profile's own settings, changed by keyword."""

from __future__ import annotations

from servekit.tune.space import Settings, Speculation

M3 = "minimax-m3-mxfp8-8xa800"


def m3_settings(**changes: object) -> Settings:
    """The M3 profile's settings (EAGLE3 with 3 drafts, 8 GPUs, 128K) with `changes`."""
    base = {"max_num_seqs": 128, "max_num_batched_tokens": 4096, "speculation": Speculation(3),
            "gpu_memory_utilization": 0.99, "estimate_cudagraphs": False,
            "tensor_parallel_size": 8, "data_parallel_size": 1, "enable_prefix_caching": True,
            "enable_chunked_prefill": True, "max_model_len": 131072}  # fmt: skip
    return Settings(**{**base, **changes})  # type: ignore[arg-type]
