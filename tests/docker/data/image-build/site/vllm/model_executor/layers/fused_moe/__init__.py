"""Fused mixture-of-experts layers (stand-in)."""

from vllm.model_executor.layers.fused_moe.topk_layout import index_buffer_layout

__all__ = ["index_buffer_layout"]
