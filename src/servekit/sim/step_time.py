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
that work with the coefficients; `step_time_s` is the two composed and the model's reference
definition. Fitting reads `StepWork` of measured steps; the engine prices its steps with
`StepPricer`, the same terms formed from the batch's context sums (equal to `step_time_s`,
tested). See docs/simulator.md for each term's physical reason.
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
        num_speculative_tokens: k, draft tokens per verifying request (with dynamic
            speculative decoding, the drafts of this step's verifications, which vary from
            step to step; a request near its end verifying fewer is priced at k).
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


class StepPricer:
    """`step_time_s` for one model, set of coefficients and k, priced from a batch's sums.

    The engine's fast path: instead of a `BatchShape` walked context by context, a step is
    given by its request counts and the sums of its contexts (plain, and capped at the
    model's attended context), with the few prefill chunks listed. The terms and their
    order are `step_work`'s and `step_time_from_work`'s; only the sums are formed in
    integers first, so the result equals `step_time_s` exactly when the model's per-token
    bytes and FLOPs are whole numbers (as planner-derived models' are) and to float
    rounding otherwise. `tests/sim/test_offline_speed.py` checks both. k is fixed: under
    dynamic speculative decoding the engine keeps one pricer per k its steps verify.
    """

    __slots__ = ("_cap", "_compute_rate", "_k", "_memory_rate", "_model", "_params", "_weights")

    def __init__(self, model: SimModel, params: StepTimeParams, num_speculative_tokens: int):
        self._model = model
        self._params = params
        self._k = num_speculative_tokens
        self._cap = model.attended_context_cap
        self._memory_rate = model.hbm_bytes_s * params.hbm_efficiency
        self._compute_rate = model.peak_flops * params.compute_efficiency
        self._weights: dict[int, float] = {}

    def attended(self, context: int) -> int:
        """Context tokens one query reads (the sparse-attention cap applied)."""
        cap = self._cap
        return context if cap is None or context < cap else cap

    def attended_sum(self, contexts: list[int]) -> int:
        """Sum of `attended` over contexts."""
        cap = self._cap
        if cap is None or not contexts or max(contexts) <= cap:
            return sum(contexts)
        return sum(c if c < cap else cap for c in contexts)

    def weight_bytes(self, tokens: int) -> float:
        """Weights one step of `tokens` tokens reads: non-expert plus experts touched."""
        weights = self._weights.get(tokens)
        if weights is None:
            model = self._model
            weights = model.nonexpert_bytes + experts_touched(model, tokens) * model.expert_bytes
            self._weights[tokens] = weights
        return weights

    def duration_s(
        self,
        decodes: int,
        verifies: int,
        decode_attended: int,
        verify_attended: int,
        contexts: int,
        chunks: list[tuple[int, int]],
    ) -> float:
        """Duration of a step: `decodes` plain decodes and `verifies` verifying requests
        whose contexts sum to `contexts` (capped: `decode_attended`, `verify_attended`),
        plus prefill `chunks` of (chunk tokens, tokens already computed)."""
        model = self._model
        k = self._k
        prefill_tokens = kv_prefill = attention_prefill = 0
        for chunk, done in chunks:
            prefill_tokens += chunk
            kv_prefill += self.attended(done + chunk)
            attention_prefill += chunk * self.attended(done + chunk // 2)
        n = decodes + verifies * (k + 1) + prefill_tokens
        if n == 0:
            return 0.0
        kv_read = (decode_attended + verify_attended + kv_prefill) * model.kv_bytes_per_token
        kv_read += contexts * model.indexer_bytes_per_token
        attention = decode_attended + (k + 1) * verify_attended + attention_prefill
        memory = self.weight_bytes(n) + kv_read
        flops = n * model.flops_per_token + attention * model.attention_flops_per_ctx_token
        p = self._params
        passes = k if verifies else 0
        ms = (
            p.base_ms
            + p.decode_request_ms * decodes
            + p.verify_request_ms * verifies
            + p.prefill_request_ms * len(chunks)
            + passes * (p.draft_pass_ms + p.draft_request_ms * verifies)
        )
        return ms / 1000 + max(memory / self._memory_rate, flops / self._compute_rate)

    def window_durations_s(self, shapes: list[tuple[int, int, int, int, int]]) -> list[float]:
        """`duration_s` of steps without prefill chunks, each given as (decodes, verifies,
        decode_attended, verify_attended, contexts), in one loop.

        The terms that depend only on the request counts (weights read, GEMM FLOPs, the
        fixed milliseconds) are formed once per distinct (decodes, verifies) and reused.
        """
        model = self._model
        p = self._params
        k = self._k
        memory_rate, compute_rate = self._memory_rate, self._compute_rate
        kv_bytes, indexer_bytes = model.kv_bytes_per_token, model.indexer_bytes_per_token
        attention_flops = model.attention_flops_per_ctx_token
        counts: dict[tuple[int, int], tuple[float, float, float]] = {}
        durations = []
        key = (-1, -1)
        fixed: tuple[float, float, float] | None = None
        for decodes, verifies, decode_attended, verify_attended, contexts in shapes:
            if decodes != key[0] or verifies != key[1]:  # mostly the same as the step before
                key = (decodes, verifies)
                fixed = counts.get(key)
            if fixed is None:
                n = decodes + verifies * (k + 1)
                passes = k if verifies else 0
                ms = (
                    p.base_ms
                    + p.decode_request_ms * decodes
                    + p.verify_request_ms * verifies
                    + p.prefill_request_ms * 0
                    + passes * (p.draft_pass_ms + p.draft_request_ms * verifies)
                )
                fixed = counts[decodes, verifies] = (
                    self.weight_bytes(n),
                    n * model.flops_per_token,
                    ms / 1000 if n else -1.0,
                )
            weights, token_flops, fixed_s = fixed
            if fixed_s < 0:  # an empty step
                durations.append(0.0)
                continue
            kv_read = (decode_attended + verify_attended) * kv_bytes
            kv_read += contexts * indexer_bytes
            attention = decode_attended + (k + 1) * verify_attended
            memory_s = (weights + kv_read) / memory_rate
            compute_s = (token_flops + attention * attention_flops) / compute_rate
            # max(memory_s, compute_s), without the call
            durations.append(fixed_s + (compute_s if compute_s > memory_s else memory_s))
        return durations

    def verify_durations_s(self, verifies: int, contexts: list[int]) -> list[float]:
        """`window_durations_s` of steps of `verifies` verifying requests and nothing else,
        none at the attention cap, whose contexts sum to contexts[i] in step i (the shape
        (0, verifies, 0, contexts[i], contexts[i]), priced with the same operations)."""
        if not contexts:
            return []
        model = self._model
        p = self._params
        k = self._k
        n = verifies * (k + 1)
        memory_rate, compute_rate = self._memory_rate, self._compute_rate
        kv_bytes, indexer_bytes = model.kv_bytes_per_token, model.indexer_bytes_per_token
        attention_flops = model.attention_flops_per_ctx_token
        weights = self.weight_bytes(n)
        token_flops = n * model.flops_per_token
        ms = (
            p.base_ms
            + p.decode_request_ms * 0
            + p.verify_request_ms * verifies
            + p.prefill_request_ms * 0
            + k * (p.draft_pass_ms + p.draft_request_ms * verifies)
        )
        fixed_s = ms / 1000
        durations = []
        for context in contexts:
            memory_s = (weights + (context * kv_bytes + context * indexer_bytes)) / memory_rate
            compute_s = (token_flops + (k + 1) * context * attention_flops) / compute_rate
            durations.append(fixed_s + (compute_s if compute_s > memory_s else memory_s))
        return durations

    def decode_durations_s(
        self, decodes: int, attended: list[int], contexts: list[int]
    ) -> list[float]:
        """Durations of consecutive steps of `decodes` plain decodes and nothing else, whose
        contexts sum to contexts[i] (capped: attended[i]) in step i."""
        model = self._model
        p = self._params
        memory_rate, compute_rate = self._memory_rate, self._compute_rate
        weights = self.weight_bytes(decodes)
        token_flops = decodes * model.flops_per_token
        kv_bytes, indexer_bytes = model.kv_bytes_per_token, model.indexer_bytes_per_token
        attention_flops = model.attention_flops_per_ctx_token
        fixed_s = (p.base_ms + p.decode_request_ms * decodes) / 1000
        return [
            fixed_s
            + max(
                (weights + (att * kv_bytes + ctx * indexer_bytes)) / memory_rate,
                (token_flops + att * attention_flops) / compute_rate,
            )
            for att, ctx in zip(attended, contexts, strict=True)
        ]
