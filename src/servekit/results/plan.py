"""`servekit plan --json` as one typed model (core): per-GPU memory in GiB (2^30 B)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servekit.results._base import Document

PLAN_VERSION: Literal[1] = 1


class PerGpu(Document):
    """Where one GPU's memory goes."""

    capacity_gib: float
    requested_gib: float
    weights_gib: float
    activation_peak_gib: float
    non_torch_gib: float
    cuda_graphs_gib: float
    kv_cache_gib: float


class WeightsBreakdown(Document):
    """The weights per GPU by part."""

    embeddings: float
    attention: float
    dense_mlp: float
    experts: float
    other: float
    draft: float


class ActivationBreakdown(Document):
    """The activation peak per GPU by part."""

    forward: float
    sampler: float
    multimodal_encoder: float


class CudaGraphs(Document):
    """The CUDA graphs captured and whether their memory is in the budget."""

    piecewise: int
    full: int
    largest_size: int
    estimate_in_budget: bool


class KvTermBlock(Document):
    """One additive term of the per-token KV size."""

    label: str
    formula: str
    bytes_per_token: int


class KvCacheGroupBlock(Document):
    """One of vLLM's KV cache groups: layers of one attention type sharing a block table."""

    kind: Literal["full", "sliding_window", "chunked", "mla"]
    layers: int
    block_size: int
    page_bytes: int
    window: int | None


class LoggedFigure(Document):
    """One figure, as planned and as the engine's startup log has it."""

    name: str
    unit: str
    planned: float
    actual: float | None
    delta_pct: float | None


class LoggedFailure(Document):
    """One startup-log line that signals a failed engine."""

    kind: str
    line: int
    text: str


class KvTermShare(Document):
    """GiB of the planned-minus-logged KV cache one term explains."""

    term: str
    gib: float


class KvExplained(Document):
    """Which terms explain the KV difference against the log, largest first."""

    kv_gap_gib: float
    terms: list[KvTermShare]
    biggest: str
    tokens_gap_pct: float | None
    bytes_per_token_logged: float | None


class FromLog(Document):
    """The plan against a startup log (`plan --from-log`)."""

    figures: list[LoggedFigure]
    failures: list[LoggedFailure]
    explained: KvExplained | None = None
    mismatches: list[str] = Field(default_factory=list)


class CheckpointBlock(Document):
    """The checkpoint's tensor bytes (`plan --model-dir`)."""

    total_bytes: int
    group_bytes: dict[str, int]


class PlanDocument(Document):
    """The `plan --json` document (docs/schemas/README.md)."""

    schema_version: Literal[1]
    profile: str
    gpu: str
    per_gpu: PerGpu
    weights_breakdown_gib: WeightsBreakdown
    activation_breakdown_gib: ActivationBreakdown
    cuda_graphs: CudaGraphs
    kv_bytes_per_token: int
    kv_terms: list[KvTermBlock]
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency_at_max_model_len: float
    kv_cache_gib_estimate_on: float
    kv_cache_gib_estimate_off: float
    fits: bool
    largest_fitting_max_model_len: int | None
    warnings: list[str]
    from_log: FromLog | None = None
    checkpoint: CheckpointBlock | None = None
    # Added in schema_version 1 as optional keys (absent in documents written before them).
    kv_cache_groups: list[KvCacheGroupBlock] | None = None
    gpu_blocks: int | None = None
