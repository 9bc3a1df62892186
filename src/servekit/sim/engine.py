"""The simulated vLLM V1 engine (core): queues, token budget, paged KV blocks, preemption.

One call to `step()` schedules and runs one engine step and returns its duration and the
tokens each request gained. Scheduling follows vLLM V1: running requests first in admission
order (decodes and unfinished prefill chunks) within `max_num_batched_tokens`, then waiting
requests FCFS while `max_num_seqs`, the budget and free KV blocks allow (chunked prefill).
When a running request needs a block and none is free, the most recently admitted request
is preempted by recompute (its blocks freed, back to the head of the queue). The clock is
the caller's: the engine has no time source and draws randomness only from the given RNG.

Prefix caching (on by default, as in vLLM V1) applies to requests that carry their token
ids: when such a request is admitted with nothing computed (new, or resumed after
preemption), the longest run of cached full blocks from the start of its tokens counts as
computed (at most up to its last token, which is always recomputed for its logits; with an
EAGLE-style draft one more block is dropped), and its full blocks are cached as they are
scheduled, output included when its output ids are given. Requests without token ids (the
offline sweep's synthetic load) never hit and only take blocks. See `prefix_cache`.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from servekit.errors import SimulationError
from servekit.sim.model import SimModel
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.sim.prefix_cache import ROOT_HASH, BlockPool, CachedBlock, chain_hash
from servekit.sim.step_time import BatchShape, step_time_s


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """Scheduler limits, in vLLM's spelling."""

    max_num_seqs: int
    max_num_batched_tokens: int
    num_speculative_tokens: int = 0


@dataclass(slots=True)
class SimRequest:
    """A request's mutable progress inside the engine.

    `token_ids` (the prompt's ids, `prompt_tokens` of them) makes the request take part in
    prefix caching; `output_ids` yields the ids of its output in order, so full blocks of
    output are cached too (a later turn re-sending this answer hits them). The engine
    reads output ids only up to the tokens generated so far.
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


@dataclass(slots=True)
class EngineStats:
    """Counters like vLLM's /metrics, accumulated over the engine's life."""

    steps: int = 0
    preemptions: int = 0
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


class Engine:
    """A simulated engine; feed it requests with `add`, advance it with `step`."""

    def __init__(
        self,
        model: SimModel,
        limits: EngineLimits,
        step_params: StepTimeParams,
        acceptance: AcceptanceParams | None,
        rng: random.Random,
        *,
        enable_prefix_caching: bool = True,
        drop_eagle_block: bool = False,
    ) -> None:
        if limits.num_speculative_tokens and acceptance is None:
            raise SimulationError(
                "speculative decoding needs acceptance probabilities",
                fix="add simulator.acceptance to the profile",
            )
        if model.num_gpu_blocks <= 0:
            raise SimulationError(
                "the KV pool has no blocks", fix="give the profile memory for a KV cache"
            )
        self.model = model
        self.limits = limits
        self.params = step_params
        self.acceptance = acceptance
        self.rng = rng
        self.pool = BlockPool(model.num_gpu_blocks, caching=enable_prefix_caching)
        self.drop_eagle_block = drop_eagle_block
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = EngineStats(accepted_per_position=[0] * limits.num_speculative_tokens)

    @property
    def idle(self) -> bool:
        """True when no request is waiting or running."""
        return not self.waiting and not self.running

    @property
    def free_blocks(self) -> int:
        """KV blocks not held by any request (cached ones no request holds included)."""
        return self.pool.free

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use."""
        return 1 - self.pool.free / self.model.num_gpu_blocks

    def add(self, request: SimRequest) -> None:
        """Queue a request.

        Raises:
            SimulationError: prompt + max_tokens exceed max_model_len (vLLM answers 400).
        """
        if request.prompt_tokens + request.max_tokens > self.model.max_model_len:
            raise SimulationError(
                f"request {request.id} needs {request.prompt_tokens + request.max_tokens} "
                f"tokens, over max_model_len {self.model.max_model_len}",
                fix="lower the input or output length",
            )
        if request.token_ids is not None:
            if len(request.token_ids) != request.prompt_tokens:
                raise SimulationError(
                    f"request {request.id} has {len(request.token_ids)} token ids for "
                    f"{request.prompt_tokens} prompt tokens",
                    fix="give one id per prompt token, or none",
                )
            if self.pool.caching:
                request.cached = []
                request.block_hashes = []
        request.prefill_target = request.prompt_tokens + request.output
        self.waiting.append(request)

    def abort(self, request_id: str) -> bool:
        """Drop a waiting or running request (its client went away), freeing its blocks.

        Returns:
            True if the request was in the engine.
        """
        for index, request in enumerate(self.running):
            if request.id == request_id:
                del self.running[index]
                self._release(request)
                return True
        for request in self.waiting:
            if request.id == request_id:
                self.waiting.remove(request)
                self._release(request)
                return True
        return False

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.model.block_size)

    def _grow(self, request: SimRequest, new_tokens: int) -> bool:
        need = self._blocks_for(request.computed + new_tokens) - request.blocks
        if need > 0:
            if need > self.pool.free:
                return False
            self.pool.take(need)
            request.blocks += need
        if request.cached is not None:
            # vLLM caches at scheduling time, up to the tokens known (drafts excluded).
            self._cache_full_blocks(request, request.computed + new_tokens)
        return True

    def _admit(self, request: SimRequest, budget: int) -> int | None:
        """Give the head of the queue its cached prefix and blocks for its first chunk.

        Returns:
            The chunk's tokens, or None when the blocks are not there (nothing changes then).
        """
        cached = request.cached
        if cached is None or request.computed:
            tokens = min(request.prefill_target - request.computed, budget)
            return tokens if self._grow(request, tokens) else None
        known = request.prompt_tokens + request.output
        # The last token is always recomputed (its logits are needed), and block-aligned.
        max_blocks = max(known - 1, 0) // self.model.block_size
        hit = self.pool.longest_hit(self._hashes(request, known), max_blocks)
        if self.drop_eagle_block and hit:
            hit.pop()  # EAGLE drafts need the hidden states of the tokens before the tail
        hit_tokens = len(hit) * self.model.block_size
        tokens = min(request.prefill_target - hit_tokens, budget)
        need = self._blocks_for(hit_tokens + tokens) - len(hit)
        if need + sum(1 for block in hit if block.refs == 0) > self.pool.free:
            return None
        self.pool.hold(hit)
        cached.extend(hit)
        request.blocks = len(hit)
        request.computed = hit_tokens
        stats = self.stats
        if request.preemptions:
            stats.preempted_prefix_cache_queries += known
            stats.preempted_prefix_cache_hits += hit_tokens
        else:
            stats.prefix_cache_queries += known
            stats.prefix_cache_hits += hit_tokens
        granted = self._grow(request, tokens)
        assert granted, "admission checked the free blocks"
        return tokens

    def _hashes(self, request: SimRequest, tokens: int) -> list[int]:
        """The request's full-block hashes over its first `tokens` known tokens."""
        hashes = request.block_hashes
        assert hashes is not None
        assert request.token_ids is not None
        size = self.model.block_size
        prompt = request.token_ids
        while len(hashes) < tokens // size:
            lo = len(hashes) * size
            ids = tuple(prompt[lo : lo + size])
            if len(ids) < size:
                if request.output_ids is None:
                    break
                ids += tuple(itertools.islice(request.output_ids, size - len(ids)))
                if len(ids) < size:
                    request.output_ids = None
                    break
            hashes.append(chain_hash(hashes[-1] if hashes else ROOT_HASH, ids))
        return hashes

    def _cache_full_blocks(self, request: SimRequest, scheduled_tokens: int) -> None:
        cached = request.cached
        assert cached is not None
        full = (
            min(scheduled_tokens, request.prompt_tokens + request.output) // self.model.block_size
        )
        if full <= len(cached):
            return
        hashes = self._hashes(request, full * self.model.block_size)
        for block_hash in hashes[len(cached) : full]:
            cached.append(self.pool.cache(block_hash))

    def _release(self, request: SimRequest) -> None:
        cached = request.cached
        if cached:
            self.pool.release(cached, request.blocks - len(cached))
            cached.clear()
        else:
            self.pool.uncached_free += request.blocks
        request.blocks = 0

    def _preempt_last(self) -> SimRequest:
        victim = self.running.pop()
        self._release(victim)
        victim.computed = 0  # recompute prompt and output so far, then sample again
        victim.prefill_target = victim.prompt_tokens + victim.output
        victim.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    def step(self) -> StepResult:
        """Schedule and run one step; an idle engine returns a zero-length step."""
        k = self.limits.num_speculative_tokens
        budget = self.limits.max_num_batched_tokens
        plan: list[tuple[SimRequest, int, bool]] = []  # (request, tokens, is_decode)
        index = 0
        while index < len(self.running):
            request = self.running[index]
            if request.prefilling:
                tokens = min(request.prefill_target - request.computed, budget)
                decode = False
            else:
                remaining = request.max_tokens - request.output
                tokens = 1 + min(k, max(remaining - 1, 0))
                decode = True
            if tokens <= 0 or tokens > budget:
                index += 1
                continue
            if not self._grow(request, tokens):
                self._preempt_last()  # may be this request; either way look again
                continue
            plan.append((request, tokens, decode))
            budget -= tokens
            index += 1
        while self.waiting and budget > 0 and len(self.running) < self.limits.max_num_seqs:
            request = self.waiting[0]
            chunk = self._admit(request, budget)
            if chunk is None:
                break
            self.waiting.popleft()
            self.running.append(request)
            plan.append((request, chunk, False))
            budget -= chunk
        return self._run(plan, k)

    def _run(self, plan: list[tuple[SimRequest, int, bool]], k: int) -> StepResult:
        decode_ctx: list[int] = []
        verify_ctx: list[int] = []
        chunks: list[tuple[int, int]] = []
        for request, tokens, decode in plan:
            if not decode:
                chunks.append((tokens, request.computed))
            elif tokens > 1:
                verify_ctx.append(request.computed)
            else:
                decode_ctx.append(request.computed)
        batch = BatchShape(tuple(decode_ctx), tuple(verify_ctx), tuple(chunks), k)
        duration = step_time_s(batch, self.model, self.params)
        gained: list[tuple[str, int]] = []
        finished: list[str] = []
        drafted = accepted_total = 0
        for request, tokens, decode in plan:
            if decode:
                drafts = tokens - 1
                accepted = self._accept(request.temperature, drafts)
                drafted += drafts
                accepted_total += accepted
                new = accepted + 1
                request.computed += new
            else:
                request.computed += tokens
                if request.prefilling:
                    continue  # the chunk did not reach the end of the prompt
                if request.output == 0:
                    self.stats.prompt_tokens += request.prompt_tokens
                new = 1  # the step that completes a prefill samples one token
            new = min(new, request.max_tokens - request.output)
            request.output += new
            self.stats.generation_tokens += new
            gained.append((request.id, new))
            if request.done:
                finished.append(request.id)
        if finished:
            done = set(finished)
            for request in [r for r in self.running if r.id in done]:
                self._release(request)
            self.running = [r for r in self.running if r.id not in done]
        self.stats.steps += 1
        if drafted:
            self.stats.drafts += sum(1 for _, t, d in plan if d and t > 1)
            self.stats.draft_tokens += drafted
            self.stats.accepted_tokens += accepted_total
        return StepResult(duration, tuple(gained), tuple(finished), batch, drafted, accepted_total)

    def _accept(self, temperature: float, drafts: int) -> int:
        if drafts <= 0 or self.acceptance is None:
            return 0
        accepted = 0
        for position, p in enumerate(self.acceptance.probabilities(temperature)[:drafts]):
            if self.rng.random() >= p:
                break
            accepted += 1
            self.stats.accepted_per_position[position] += 1
        return accepted
