"""The step-time model (core): how long one engine step takes for a batch composition.

    t = base
      + max(t_memory, t_compute)                         roofline over the whole step
      + decode_request x plain decodes + verify_request x verifying requests
      + prefill_request x requests with a prefill chunk
      + k x (draft_pass + draft_request x verifying requests)        speculative drafting

    t_memory  = (non-expert weights + experts touched x bytes per expert + KV read)
                / (HBM bandwidth x hbm_efficiency)
    t_compute = (tokens x FLOPs per token + attention FLOPs) / (peak x compute_efficiency)

See docs/simulator.md for each term's physical reason.
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


def _attended(model: SimModel, context: int) -> int:
    cap = model.attended_context_cap
    return context if cap is None else min(context, cap)


def step_time_s(batch: BatchShape, model: SimModel, params: StepTimeParams) -> float:
    """Return the duration of one step in seconds (0 for an empty batch)."""
    if batch.empty:
        return 0.0
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
    t_memory = (weights + kv_read) / (model.hbm_bytes_s * params.hbm_efficiency)
    t_compute = (n * model.flops_per_token + attention_flops) / (
        model.peak_flops * params.compute_efficiency
    )
    ms = (
        params.base_ms
        + params.decode_request_ms * len(batch.decode_contexts)
        + params.verify_request_ms * len(batch.verify_contexts)
        + params.prefill_request_ms * len(batch.prefill_chunks)
    )
    if batch.verify_contexts:
        ms += batch.num_speculative_tokens * (
            params.draft_pass_ms + params.draft_request_ms * len(batch.verify_contexts)
        )
    return ms / 1000 + max(t_memory, t_compute)
