"""The simulated vLLM V1 engine (core): queues, token budget, paged KV blocks, preemption.

One call to `step()` schedules and runs one engine step and returns its duration and the
tokens each request gained. Scheduling follows vLLM V1: running requests first in admission
order (decodes and unfinished prefill chunks) within `max_num_batched_tokens`, then waiting
requests FCFS while `max_num_seqs`, the budget and free KV blocks allow (chunked prefill;
with `enable_chunked_prefill` off a waiting request is admitted only when its whole prefill
fits the budget left, and the queue waits behind it otherwise).
When a running request needs a block and none is free, the most recently admitted request
is preempted by recompute (its blocks freed, back to the head of the queue). The clock is
the caller's: the engine has no time source and draws randomness only from the given RNG.
`decode_window()` runs a stretch of pure-decode steps at once for the offline simulator: the
same steps, draws and results as calling `step()` for each (faster, not different); the
windows themselves are in `_decode_windows`, and the values the engine works on (limits,
requests, step results, counters) in `_engine_values`, re-exported here.

Prefix caching (on by default, as in vLLM V1) applies to requests that carry their token
ids: when such a request is admitted with nothing computed (new, or resumed after
preemption), the longest run of cached full blocks from the start of its tokens counts as
computed (at most up to its last token, which is always recomputed for its logits; with an
EAGLE-style draft one more block is dropped), and its full blocks are cached as they are
scheduled, output included when its output ids are given. Requests without token ids (the
offline sweep's synthetic load) never hit and only take blocks. See `prefix_cache`.

Speculative decoding proposes k drafts for each request after every step in which it samples
a token, and the request verifies them in its next step. k is `num_speculative_tokens`, or
with dynamic speculative decoding (`EngineLimits.dynamic_sd_lookup`) the lookup at the
number of requests that step scheduled; a request kept from drafting (k 0) decodes plainly.
A step is priced at the most drafts a request in it verifies (see `dynamic_sd`).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from collections.abc import Callable

from servekit.errors import SimulationError
from servekit.sim._decode_windows import decode_only_window, single_verify_window, verify_window
from servekit.sim._engine_values import (
    DecodeWindow,
    EngineLimits,
    EngineStats,
    SimRequest,
    StepResult,
)
from servekit.sim.model import SimModel
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.sim.prefix_cache import ROOT_HASH, BlockPool, chain_hash
from servekit.sim.step_time import BatchShape, StepPricer

__all__ = ["DecodeWindow", "Engine", "EngineLimits", "EngineStats", "SimRequest", "StepResult"]


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
        lookup = limits.dynamic_sd_lookup
        k = limits.num_speculative_tokens
        if lookup is not None and (
            not k or len(lookup) != limits.max_num_seqs + 1 or not all(0 <= n <= k for n in lookup)
        ):
            raise SimulationError(
                f"dynamic_sd_lookup has {len(lookup)} entries from {min(lookup, default=0)} to "
                f"{max(lookup, default=0)}, for max_num_seqs {limits.max_num_seqs} and "
                f"num_speculative_tokens {k}",
                fix="build it with servekit.sim.dynamic_sd.dynamic_sd_lookup",
            )
        if (
            not limits.enable_chunked_prefill
            and limits.max_num_batched_tokens < model.max_model_len
        ):
            # vLLM refuses to start (SchedulerConfig.verify_max_model_len): a prompt longer
            # than the budget could never be scheduled.
            raise SimulationError(
                f"with chunked prefill off, max_num_batched_tokens "
                f"{limits.max_num_batched_tokens} must be at least max_model_len "
                f"{model.max_model_len} (vLLM refuses to start)",
                fix=f"raise max_num_batched_tokens to {model.max_model_len}, lower "
                f"max_model_len to {limits.max_num_batched_tokens}, or leave "
                "enable_chunked_prefill on",
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
        self._pricer = StepPricer(model, step_params, k)
        self._pricers = {k: self._pricer}  # by the drafts a step verifies
        self._probabilities: dict[float, tuple[float, ...]] = {}  # by temperature

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

    def _pricer_for(self, k: int) -> StepPricer:
        """The step pricer for steps whose requests verify k drafts."""
        pricer = self._pricers.get(k)
        if pricer is None:
            pricer = self._pricers[k] = StepPricer(self.model, self.params, k)
        return pricer

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.model.block_size)

    def _grow(self, request: SimRequest, new_tokens: int) -> bool:
        need = self._blocks_for(request.computed + new_tokens) - request.blocks
        if need > 0:
            if need > self.pool.free:
                self.stats.kv_short += 1
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
            The chunk's tokens, or None when the blocks are not there or, with chunked
            prefill off, the budget does not hold its whole prefill (nothing changes then).
        """
        cached = request.cached
        whole = not self.limits.enable_chunked_prefill
        if cached is None or request.computed:
            tokens = request.prefill_target - request.computed
            if tokens > budget:
                if whole:
                    return None  # vLLM stops admitting for this step
                tokens = budget
            return tokens if self._grow(request, tokens) else None
        known = request.prompt_tokens + request.output
        # The last token is always recomputed (its logits are needed), and block-aligned.
        max_blocks = max(known - 1, 0) // self.model.block_size
        hit = self.pool.longest_hit(self._hashes(request, known), max_blocks)
        if self.drop_eagle_block and hit:
            hit.pop()  # EAGLE drafts need the hidden states of the tokens before the tail
        hit_tokens = len(hit) * self.model.block_size
        tokens = request.prefill_target - hit_tokens
        if tokens > budget:
            if whole:
                return None  # before the lookup counts: vLLM counts it at admission
            tokens = budget
        need = self._blocks_for(hit_tokens + tokens) - len(hit)
        if need + sum(1 for block in hit if block.refs == 0) > self.pool.free:
            self.stats.kv_short += 1
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
        if request.hit_tokens is None:  # vLLM keeps the first admission's figure
            request.hit_tokens = hit_tokens
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
        lookup = self.limits.dynamic_sd_lookup
        budget = self.limits.max_num_batched_tokens
        block_size = self.model.block_size
        plan: list[tuple[SimRequest, int, bool]] = []  # (request, tokens, is_decode)
        add = plan.append
        running = self.running
        index = 0
        while index < len(running):
            request = running[index]
            computed = request.computed
            if computed < request.prefill_target:
                tokens = min(request.prefill_target - computed, budget)
                decode = False
            else:
                if lookup is not None:
                    k = request.drafts
                remaining = request.max_tokens - request.output
                # 1 + min(k, max(remaining - 1, 0)): the drafts that can still be used
                tokens = k + 1 if remaining > k else (remaining if remaining > 0 else 1)
                decode = True
            if tokens <= 0 or tokens > budget:
                index += 1
                continue
            # without prefix-cache state, _grow does nothing when the blocks held cover the step
            needs_grow = (
                request.cached is not None or computed + tokens > request.blocks * block_size
            )
            if needs_grow and not self._grow(request, tokens):
                self._preempt_last()  # may be this request; either way look again
                continue
            add((request, tokens, decode))
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
        if lookup is not None:
            return self._run_dynamic(plan, lookup)
        return self._run(plan, k)

    def _run_dynamic(
        self, plan: list[tuple[SimRequest, int, bool]], lookup: tuple[int, ...]
    ) -> StepResult:
        """`_run` with dynamic speculative decoding: the step is priced at the most drafts a
        request verifies, then each request that sampled a token is given the drafts the
        lookup holds for this step's batch size (vLLM's placeholders for its next step)."""
        verified = (r.drafts for r, tokens, decode in plan if decode and tokens > 1)
        result = self._run(plan, max(verified, default=0))
        following = lookup[len(plan)] if plan else 0
        for request, _, _ in plan:
            if request.computed >= request.prefill_target:  # not a partial prefill chunk
                request.drafts = following
        return result

    def _run(self, plan: list[tuple[SimRequest, int, bool]], k: int) -> StepResult:
        """Run a scheduled step: one pass over the plan notes each request's context (the
        batch the step is priced on) before it advances the request."""
        decode_ctx: list[int] = []
        verify_ctx: list[int] = []
        chunks: list[tuple[int, int]] = []
        gained: list[tuple[str, int]] = []
        finished: list[str] = []
        stats = self.stats
        drafted = accepted_total = generated = 0
        draw = self.rng.random
        per_position = stats.accepted_per_position
        probabilities = self._probabilities
        for request, tokens, decode in plan:
            if decode:
                drafts = tokens - 1
                accepted = 0
                if drafts > 0:  # as _accept, inline
                    verify_ctx.append(request.computed)
                    probs = probabilities.get(request.temperature) or (
                        self._accept_probabilities(request.temperature)
                    )
                    for p in probs[:drafts]:  # each draft while accepted, at most len(probs)
                        if draw() >= p:
                            break
                        per_position[accepted] += 1
                        accepted += 1
                    drafted += drafts
                    accepted_total += accepted
                else:
                    decode_ctx.append(request.computed)
                new = accepted + 1
                request.computed += new
            else:
                chunks.append((tokens, request.computed))
                request.computed += tokens
                if request.computed < request.prefill_target:
                    continue  # the chunk did not reach the end of the prompt
                if request.output == 0:
                    stats.prompt_tokens += request.prompt_tokens
                new = 1  # the step that completes a prefill samples one token
            left = request.max_tokens - request.output
            if new > left:
                new = left
            request.output += new
            generated += new
            gained.append((request.id, new))
            if new == left:
                finished.append(request.id)
        batch = BatchShape(tuple(decode_ctx), tuple(verify_ctx), tuple(chunks), k)
        pricer = self._pricer if k == self.limits.num_speculative_tokens else self._pricer_for(k)
        duration = pricer.duration_s(
            len(decode_ctx),
            len(verify_ctx),
            pricer.attended_sum(decode_ctx),
            pricer.attended_sum(verify_ctx),
            sum(decode_ctx) + sum(verify_ctx),
            chunks,
        )
        stats.generation_tokens += generated
        if finished:
            self._finish(finished)
        stats.steps += 1
        if drafted:
            stats.drafts += len(verify_ctx)
            stats.draft_tokens += drafted
            stats.accepted_tokens += accepted_total
        return StepResult(duration, tuple(gained), tuple(finished), batch, drafted, accepted_total)

    def _finish(self, finished: list[str]) -> None:
        done = set(finished)
        for request in [r for r in self.running if r.id in done]:
            self._release(request)
        self.running = [r for r in self.running if r.id not in done]

    def decode_window(self, stop: Callable[[float], bool] | None = None) -> DecodeWindow | None:
        """Run the steps `step()` would run while every running request only decodes.

        The window ends with the first step in which a request finishes, before a step that
        needs more KV blocks than are free (preemption is `step()`'s), or after the first
        step for which `stop(duration_s)` is true (the caller's clock reached an arrival).

        Returns:
            The steps run, or None when the next step is not a pure decode step (a request
            prefills, a waiting request could be admitted, the batch exceeds the token
            budget, or it needs blocks that are not free), a running request takes part
            in prefix caching (its blocks are named as they fill), with dynamic speculative
            decoding a request verifies other than the lookup's k for this batch size (its
            drafts were proposed after a step of another size), or `step()` has been
            replaced; call `step()` then.
        """
        running = self.running
        limits = self.limits
        lookup = limits.dynamic_sd_lookup
        # Every step of a window schedules the same requests, so with a lookup its k is
        # lookup[len(running)] throughout, once each request's drafts are that k.
        k = limits.num_speculative_tokens if lookup is None else lookup[len(running)]
        if (
            # the steps of a window are this class's step(); with step() replaced (by a
            # subclass, or a wrapper on the instance that watches each step) every step
            # goes through it
            getattr(self.step, "__func__", None) is not Engine.step
            or not running
            or (self.waiting and len(running) < limits.max_num_seqs)
            or len(running) * (k + 1) > limits.max_num_batched_tokens
            # newly admitted requests (the ones still prefilling, mostly) are at the end
            or any(r.computed < r.prefill_target or r.cached is not None for r in reversed(running))
            or (lookup is not None and any(r.drafts != k for r in running))
        ):
            return None
        pool, stats, pricer = self.pool, self.stats, self._pricer_for(k)
        if not k:
            window = decode_only_window(running, self.model, pool, stats, pricer, stop)
        elif len(running) == 1:
            probs = self._accept_probabilities(running[0].temperature)
            window = single_verify_window(
                running[0], k, self.model, pool, stats, self.rng.random, probs, pricer, stop
            )
        else:
            probabilities = [self._accept_probabilities(r.temperature) for r in running]
            window = verify_window(
                running, k, self.model, pool, stats, self.rng.random, probabilities, pricer, stop
            )
        if window is not None and window.finished:
            self._finish(list(window.finished))
            window.kv_usage[-1] = self.kv_usage
        return window

    def _accept_probabilities(self, temperature: float) -> tuple[float, ...]:
        probs = self._probabilities.get(temperature)
        if probs is None:
            assert self.acceptance is not None
            probs = self._probabilities[temperature] = self.acceptance.probabilities(temperature)
        return probs
