"""CUDA-graph capture sizes and graph memory per GPU (core).

vLLM captures one graph per batch size in two modes by default (FULL_AND_PIECEWISE):
piecewise graphs for every capture size and full graphs for uniform-decode sizes up
to max_num_seqs x (1 + k). Graph memory grows with the number of captured kernels,
i.e. with graphs x layers, plus the workspace of the largest captured batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servekit.plan.activations import forward_live_bytes
from servekit.plan.inputs import PlanInputs
from servekit.units import MIB

# vLLM's default ceiling on the largest capture size.
MAX_CAPTURE_SIZE_CAP = 512
# Graph memory per captured graph per layer, measured in public vLLM startup logs:
# dense layers from Qwen3-8B (0.52 GiB for 86 graphs x 36 layers), MoE layers from
# Qwen3.5-35B-A3B (1.34 GiB actual pool for 67 graphs x 40 layers). See docs/memory-model.md.
DENSE_LAYER_GRAPH_BYTES = 0.172 * MIB
MOE_LAYER_GRAPH_BYTES = 0.512 * MIB


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """Which graphs vLLM captures and what they cost per GPU."""

    piecewise_sizes: tuple[int, ...]
    full_sizes: tuple[int, ...]
    per_graph_bytes: float
    workspace_bytes: float
    measured_bytes: float | None = None  # a calibration's measured figure, replacing the model

    @property
    def num_graphs(self) -> int:
        """Graphs captured in both modes."""
        return len(self.piecewise_sizes) + len(self.full_sizes)

    @property
    def total_bytes(self) -> float:
        """Graph memory: per-graph cost times graphs, plus the largest batch's workspace (or
        the measured figure)."""
        if self.measured_bytes is not None:
            return self.measured_bytes
        if not self.num_graphs:
            return 0.0
        return self.per_graph_bytes * self.num_graphs + self.workspace_bytes


def max_capture_size(inputs: PlanInputs) -> int:
    """vLLM's default largest capture size: min(2 x max_num_seqs x (1+k), 512, budget)."""
    size = inputs.max_cudagraph_capture_size or min(
        inputs.max_num_seqs * inputs.decode_query_len * 2, MAX_CAPTURE_SIZE_CAP
    )
    return min(size, inputs.max_num_batched_tokens)


def capture_sizes(inputs: PlanInputs) -> tuple[int, ...]:
    """vLLM's default capture sizes: 1, 2, 4, every 8 to 248, every 16 from 256.

    With speculative decoding each size is rounded up to a multiple of 1 + k.
    """
    largest = max_capture_size(inputs)
    base = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    q = inputs.decode_query_len
    rounded = {math.ceil(s / q) * q for s in base if s <= largest}
    return tuple(sorted(s for s in rounded if s <= largest))


def graph_plan(inputs: PlanInputs) -> GraphPlan:
    """Return the graphs captured and their memory per GPU (none with enforce_eager)."""
    if inputs.enforce_eager:
        return GraphPlan((), (), 0.0, 0.0)
    sizes = capture_sizes(inputs)
    full_limit = inputs.max_num_seqs * inputs.decode_query_len
    full = tuple(s for s in sizes if s <= full_limit)
    m = inputs.model
    layers = math.ceil(m.num_layers / inputs.pipeline_parallel_size)
    moe_layers = math.ceil(m.moe_layers / inputs.pipeline_parallel_size)
    per_graph = moe_layers * MOE_LAYER_GRAPH_BYTES + (layers - moe_layers) * DENSE_LAYER_GRAPH_BYTES
    workspace = forward_live_bytes(inputs, max(sizes)) if sizes else 0.0
    return GraphPlan(sizes, full, per_graph, workspace)
