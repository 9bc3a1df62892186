"""The step-time model (core): how long one engine step takes for a batch composition.

    t = base
      + max(t_memory, t_compute)                         roofline over the whole step
      + decode_request x plain decodes + verify_request x verifying requests
      + prefill_request x requests with a prefill chunk
      + k x (draft_pass + draft_request x verifying requests)        speculative drafting

    t_memory  = (non-expert weights + experts touched x bytes per expert + KV read)
                / (HBM bandwidth x hbm_efficiency)
    t_compute = (tokens x FLOPs per token + attention FLOPs) / (peak x compute_efficiency)

The model is split in two: `step_work` says what a batch does (bytes read, FLOPs, request
counts; it depends on the model, never on the coefficients), `step_time_from_work` prices
that work with the coefficients. Fitting reads `StepWork` of measured steps; the engine calls
`step_time_s`. See docs/simulator.md for each term's physical reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.sim.model import SimModel, experts_touched
from servekit.sim.params import StepTimeParams


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What one step computes.

    Attributes:
        decode_contexts: context length of each request decoding one token.
        verify_contexts: context length of each request verifying k+1 tokens.
        prefill_chunks: (chunk tokens, tokens already computed) per prefilling request.
        num_speculative_tokens: k, draft tokens per verifying request.
    """

    decode_contexts: tuple[int, ...] = ()
    verify_contexts: tuple[int, ...] = ()
    prefill_chunks: tuple[tuple[int, int], ...] = ()
    num_speculative_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        """Tokens the target model processes in this step."""
        verify = len(self.verify_contexts) * (self.num_speculative_tokens + 1)
        return len(self.decode_contexts) + verify + sum(c for c, _ in self.prefill_chunks)

    @property
    def empty(self) -> bool:
        """True when the step computes nothing."""
        return self.num_tokens == 0


@dataclass(frozen=True, slots=True)
class StepWork:
    """The coefficient-free work of one step.

    Attributes:
        memory_bytes: weights (non-expert + experts touched) and KV bytes read, per GPU.
        flops: GEMM FLOPs of the step's tokens plus attention FLOPs, per GPU.
        hbm_bytes_s: the GPU's memory bandwidth, bytes/s.
        peak_flops: the GPU's dense peak, FLOP/s.
        decodes: requests decoding one token.
        verifies: requests verifying k+1 tokens.
        prefills: requests with a prefill chunk.
        draft_passes: sequential draft passes (k when any request verifies, else 0).
        tokens: tokens the target model processes.
    """

    memory_bytes: float
    flops: float
    hbm_bytes_s: float
    peak_flops: float
    decodes: int
    verifies: int
    prefills: int
    draft_passes: int
    tokens: int

    @property
    def empty(self) -> bool:
        """True when the step computes nothing."""
        return self.tokens == 0


EMPTY_WORK = StepWork(0.0, 0.0, 1.0, 1.0, 0, 0, 0, 0, 0)


def _attended(model: SimModel, context: int) -> int:
    cap = model.attended_context_cap
    return context if cap is None else min(context, cap)


def step_work(batch: BatchShape, model: SimModel) -> StepWork:
    """Return the bytes, FLOPs and request counts of one step (all zero for an empty batch)."""
    if batch.empty:
        return EMPTY_WORK
    n = batch.num_tokens
    kv_read = 0.0
    attention_flops = 0.0
    q_verify = batch.num_speculative_tokens + 1
    for context in batch.decode_contexts:
        kv_read += _attended(model, context) * model.kv_bytes_per_token
        kv_read += context * model.indexer_bytes_per_token
        attention_flops += _attended(model, context) * model.attention_flops_per_ctx_token
    for context in batch.verify_contexts:
        kv_read += _attended(model, context) * model.kv_bytes_per_token
        kv_read += context * model.indexer_bytes_per_token
        attention_flops += (
            q_verify * _attended(model, context) * model.attention_flops_per_ctx_token
        )
    for chunk, done in batch.prefill_chunks:
        kv_read += _attended(model, done + chunk) * model.kv_bytes_per_token
        # each new token attends on average to the cached tokens plus half the chunk
        attention_flops += (
            chunk * _attended(model, done + chunk // 2) * (model.attention_flops_per_ctx_token)
        )
    weights = model.nonexpert_bytes + experts_touched(model, n) * model.expert_bytes
    return StepWork(
        memory_bytes=weights + kv_read,
        flops=n * model.flops_per_token + attention_flops,
        hbm_bytes_s=model.hbm_bytes_s,
        peak_flops=model.peak_flops,
        decodes=len(batch.decode_contexts),
        verifies=len(batch.verify_contexts),
        prefills=len(batch.prefill_chunks),
        draft_passes=batch.num_speculative_tokens if batch.verify_contexts else 0,
        tokens=n,
    )


def step_time_from_work(work: StepWork, params: StepTimeParams) -> float:
    """Return the duration in seconds of a step doing `work` (0 for no work)."""
    if work.empty:
        return 0.0
    t_memory = work.memory_bytes / (work.hbm_bytes_s * params.hbm_efficiency)
    t_compute = work.flops / (work.peak_flops * params.compute_efficiency)
    ms = (
        params.base_ms
        + params.decode_request_ms * work.decodes
        + params.verify_request_ms * work.verifies
        + params.prefill_request_ms * work.prefills
        + work.draft_passes * (params.draft_pass_ms + params.draft_request_ms * work.verifies)
    )
    return ms / 1000 + max(t_memory, t_compute)


def step_time_s(batch: BatchShape, model: SimModel, params: StepTimeParams) -> float:
    """Return the duration of one step in seconds (0 for an empty batch)."""
    return step_time_from_work(step_work(batch, model), params)
