"""The simulated engine's values (core): limits, a request's progress, steps, counters.

`servekit.sim.engine` runs requests on them and re-exports every name here; the decode
windows (`_decode_windows`) read and write them too, so they live apart from both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from servekit.sim.prefix_cache import CachedBlock
from servekit.sim.step_time import BatchShape


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """Scheduler limits and switches, in vLLM's spelling.

    Attributes:
        max_num_seqs: the most requests running at once.
        max_num_batched_tokens: the token budget of one step.
        num_speculative_tokens: k, the drafts proposed per request after a step (0: no
            speculative decoding); with `dynamic_sd_lookup`, the most.
        dynamic_sd_lookup: dynamic speculative decoding, from `dynamic_sd.dynamic_sd_lookup`:
            entry n is the drafts proposed after a step that scheduled n requests (n from 1
            to max_num_seqs; entry 0 unused). None: always num_speculative_tokens.
        enable_chunked_prefill: False: a waiting request is admitted only when its whole
            prefill fits the step's remaining budget (it and those behind it wait
            otherwise), so no prefill is ever split over steps.
    """

    max_num_seqs: int
    max_num_batched_tokens: int
    num_speculative_tokens: int = 0
    dynamic_sd_lookup: tuple[int, ...] | None = None
    enable_chunked_prefill: bool = True


@dataclass(slots=True)
class SimRequest:
    """A request's mutable progress inside the engine.

    `token_ids` (the prompt's ids, `prompt_tokens` of them) makes the request take part in
    prefix caching; `output_ids` yields the ids of its output in order, so full blocks of
    output are cached too (a later turn re-sending this answer hits them). The engine
    reads output ids only up to the tokens generated so far. `hit_tokens` is the prompt
    prefix the cache granted at the request's first admission (vLLM's `num_cached_tokens`,
    reported as usage `prompt_tokens_details.cached_tokens`); None until it is admitted or
    when it takes no part in prefix caching.
    """

    id: str
    prompt_tokens: int
    max_tokens: int
    temperature: float = 0.0
    computed: int = 0  # tokens whose KV is in the cache
    output: int = 0
    blocks: int = 0
    preemptions: int = 0
    prefill_target: int = -1  # tokens to (re)compute before decoding; set when queued
    token_ids: Sequence[int] | None = None
    output_ids: Iterator[int] | None = None
    cached: list[CachedBlock] | None = None  # held blocks with a hash, the first ones
    block_hashes: list[int] | None = None  # hashes of the full blocks known so far
    hit_tokens: int | None = None
    drafts: int = 0  # with dynamic_sd_lookup: drafts proposed for it after its last sample

    @property
    def prefilling(self) -> bool:
        """True while prompt tokens (or, after preemption, recomputed tokens) remain."""
        return self.computed < self.prefill_target

    @property
    def done(self) -> bool:
        """True once every requested output token exists."""
        return self.output >= self.max_tokens


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step did.

    Attributes:
        duration_s: how long the step took on the modelled GPUs.
        gained: (request id, tokens emitted) for every request that emitted tokens;
            one entry is one streamed chunk.
        finished: ids of requests that completed in this step.
        batch: the batch composition that was run.
        drafted: draft tokens proposed in this step.
        accepted: draft tokens accepted in this step.
    """

    duration_s: float
    gained: tuple[tuple[str, int], ...]
    finished: tuple[str, ...]
    batch: BatchShape
    drafted: int = 0
    accepted: int = 0


@dataclass(frozen=True, slots=True)
class DecodeWindow:
    """Consecutive steps in which every running request decodes and nothing else happens.

    `decode_window` runs them at once; they are the steps `step()` would have run one by one,
    with the same RNG draws in the same order. Every request of `requests` emits one chunk in
    each step.

    Attributes:
        durations_s: each step's duration.
        kv_usage: the fraction of KV blocks in use after each step.
        requests: ids of the requests that ran, in scheduling order.
        tokens: tokens each of `requests` emitted in each step (None: one in every step).
        finished: ids of the requests that completed in the last step.
    """

    durations_s: list[float]
    kv_usage: list[float]
    requests: tuple[str, ...]
    tokens: list[list[int]] | None
    finished: tuple[str, ...]


@dataclass(slots=True)
class EngineStats:
    """Counters like vLLM's /metrics, accumulated over the engine's life."""

    steps: int = 0
    preemptions: int = 0
    # times a request asked for KV blocks and too few were free (it waited or preempted):
    # a run without any ran as it would with a larger pool
    kv_short: int = 0
    generation_tokens: int = 0
    prompt_tokens: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    # vLLM's PrefixCacheStats, in tokens: a lookup counts when its request is admitted
    # (not while it waits for blocks); resumed (preempted) requests count apart, and only
    # the first pair is exported as vllm:prefix_cache_queries / vllm:prefix_cache_hits.
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    preempted_prefix_cache_queries: int = 0
    preempted_prefix_cache_hits: int = 0
