"""Decode windows of the simulated engine (core): runs of pure-decode steps at once.

`Engine.decode_window` calls one of these when every running request only decodes. Each
runs the steps `Engine.step()` would run one by one, with the same RNG draws in the same
order and the same integers stored on the requests, blocks and counters; it returns the
window, and the engine then finishes the requests named in it. A request's progress is
kept in local lists while a window runs and written back at its end. The drafts per request,
k, are the same in every step of a window: with dynamic speculative decoding the engine
starts one only when each request's drafts are the lookup's k for the batch, which no step
of the window changes (the same requests are scheduled in each).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from servekit.sim._engine_values import DecodeWindow, EngineStats, SimRequest
from servekit.sim.model import SimModel
from servekit.sim.prefix_cache import BlockPool
from servekit.sim.step_time import StepPricer

Stop = Callable[[float], bool] | None
Shape = tuple[int, int, int, int, int]  # decodes, verifies, decode/verify attended, contexts


def decode_only_window(
    running: list[SimRequest], model: SimModel, pool: BlockPool, stats: EngineStats,
    pricer: StepPricer, stop: Stop,
) -> DecodeWindow | None:  # fmt: skip
    """Without speculative decoding: one token per request per step, no RNG, O(1) a step."""
    n = len(running)
    size = model.block_size
    steps = min(r.max_tokens - r.output for r in running)  # the first finish ends it
    contexts = [r.computed for r in running]
    need_at: Counter[int] = Counter()  # step -> requests that take a new block in it
    for request in running:
        # a block more once the step's token passes the blocks held
        need_at.update(range(request.blocks * size - request.computed, steps, size))
    free = pool.free
    kv_usage: list[float] = []
    total = model.num_gpu_blocks
    for step in range(steps):
        need = need_at.get(step, 0)
        if need > free:
            steps = step
            break
        free -= need
        kv_usage.append(1 - free / total)
    if steps == 0:
        return None
    cap = model.attended_context_cap
    first = sum(contexts)
    context_sums = range(first, first + n * steps, n)
    if cap is None or max(contexts) + steps - 1 <= cap:
        attended_sums: list[int] | range = context_sums
    else:
        attended_sums = [
            sum(c + step if c + step < cap else cap for c in contexts) for step in range(steps)
        ]
    durations = pricer.decode_durations_s(n, list(attended_sums), list(context_sums))
    if stop is not None:
        for step, duration in enumerate(durations):
            if stop(duration):
                steps = step + 1
                del durations[steps:], kv_usage[steps:]
                break
    pool.take(sum(need for step, need in need_at.items() if step < steps))
    finished = []
    for request in running:
        request.computed += steps
        request.output += steps
        request.blocks = max(request.blocks, -(-request.computed // size))
        if request.output >= request.max_tokens:
            finished.append(request.id)
    stats.steps += steps
    stats.generation_tokens += n * steps
    ids = tuple(r.id for r in running)
    return DecodeWindow(durations, kv_usage, ids, None, tuple(finished))


def verify_window(
    running: list[SimRequest], k: int, model: SimModel, pool: BlockPool, stats: EngineStats,
    draw: Callable[[], float], probabilities: Sequence[tuple[float, ...]], pricer: StepPricer,
    stop: Stop,
) -> DecodeWindow | None:  # fmt: skip
    """With speculative decoding: each step as `step()` runs it, one request at a time.

    A request's tokens to come are `target - computed` (in a window every token a request
    computes is emitted: the accepted drafts and the sampled one, never past its end), and
    its held blocks are kept as token slots (`limit`). While the free blocks cover the most
    a step can take (`ceil((k + 1) / block_size)` per request), a step is one pass over
    the requests; otherwise its blocks are counted first, and a step they do not fit is
    left to `step()`. The common steps (every request verifies k drafts, none near its
    end or the attention cap) come first, as the tokens left only shrink and the contexts
    only grow; they take a shorter loop, are priced by `StepPricer.verify_durations_s`,
    and their accepted positions are counted per verify and added up at the end.
    """
    n = len(running)
    size = model.block_size
    cap = model.attended_context_cap
    big = cap if cap is not None else 1 << 62
    price = pricer.duration_s
    per_position = stats.accepted_per_position
    full = [probs[:k] for probs in probabilities]  # what a verify of k drafts tries
    computed = [r.computed for r in running]
    target = [r.computed + r.max_tokens - r.output for r in running]
    limit = [r.blocks * size for r in running]
    start_computed = sum(computed)
    rows: list[list[int]] = []  # tokens per step, a row of n
    safe = n * -(-(k + 1) // size)  # free blocks that make any step fit
    shapes: list[Shape] = []
    durations: list[float] = []
    frees: list[int] = []
    finished: list[int] = []
    verified = [0] * (k + 2)  # common-step verifies by tokens advanced (accepted + 1)
    free = pool.free
    k1 = k + 1
    taken = drafted = drafts_total = 0
    requests = range(n)
    pairs = list(zip(requests, full, strict=True))
    sums: list[int] = []  # context sums of the common steps, which come first
    common = True  # until a request nears its end or the attention cap (then for good)
    while True:
        if free < safe:
            need = 0
            for i in requests:
                short = computed[i] + min(k1, target[i] - computed[i]) - limit[i]
                if short > 0:
                    need += -(-short // size)
            if need > free:
                break
        row: list[int] = []
        add = row.append
        contexts = sum(computed)
        if common:
            common = min(map(int.__sub__, target, computed)) > k and max(computed) < big
        if common:
            need = 0
            for i, probs in pairs:
                context = computed[i]
                if context + k1 > limit[i]:
                    more = -(-(context + k1 - limit[i]) // size)
                    need += more
                    limit[i] += more * size
                advance = 1  # the sampled token, then each accepted draft
                for p in probs:
                    if draw() >= p:
                        break
                    advance += 1
                verified[advance] += 1
                context += advance
                computed[i] = context
                add(advance)
                if context == target[i]:
                    finished.append(i)
            drafted += n * k
            verifies = n
            shape = None
        else:
            need = decodes = verifies = decode_attended = verify_attended = 0
            for i, probs in pairs:
                context = computed[i]
                remaining = target[i] - context
                planned = k1 if remaining > k else remaining
                if context + planned > limit[i]:
                    more = -(-(context + planned - limit[i]) // size)
                    need += more
                    limit[i] += more * size
                advance = 1
                if planned > 1:
                    verifies += 1
                    verify_attended += context if context < big else big
                    drafts = planned - 1
                    for position, p in enumerate(probs[:drafts]):
                        if draw() >= p:
                            break
                        advance += 1
                        per_position[position] += 1
                    drafted += drafts
                else:
                    decodes += 1
                    decode_attended += context if context < big else big
                computed[i] = context + advance
                add(advance)
                if advance == remaining:
                    finished.append(i)
            shape = (decodes, verifies, decode_attended, verify_attended, contexts)
        rows.append(row)
        free -= need
        taken += need
        drafts_total += verifies
        frees.append(free)
        if stop is not None:
            durations.append(price(*(shape or (0, n, 0, contexts, contexts)), []))
        elif shape is None:
            sums.append(contexts)
        else:
            shapes.append(shape)
        if finished or (stop is not None and stop(durations[-1])):
            break
    if not frees:
        return None
    if stop is None:
        durations = pricer.verify_durations_s(n, sums) + pricer.window_durations_s(shapes)
    for advance in range(2, k + 2):
        for position in range(advance - 1):
            per_position[position] += verified[advance]
    for i, request in enumerate(running):
        request.output += computed[i] - request.computed
        request.computed = computed[i]
        request.blocks = limit[i] // size
    pool.take(taken)
    steps = len(frees)
    stats.steps += steps
    gained = sum(computed) - start_computed
    stats.generation_tokens += gained
    if drafted:
        stats.drafts += drafts_total
        stats.draft_tokens += drafted
        stats.accepted_tokens += gained - steps * n
    ids = tuple(r.id for r in running)
    tokens = [list(column) for column in zip(*rows, strict=True)]
    total = model.num_gpu_blocks
    return DecodeWindow(
        durations, [1 - f / total for f in frees], ids, tokens, tuple(ids[i] for i in finished)
    )


def single_verify_window(
    request: SimRequest, k: int, model: SimModel, pool: BlockPool, stats: EngineStats,
    draw: Callable[[], float], probs: tuple[float, ...], pricer: StepPricer, stop: Stop,
) -> DecodeWindow | None:  # fmt: skip
    """`verify_window` for one running request (concurrency 1), on plain variables."""
    size = model.block_size
    cap = model.attended_context_cap
    big = cap if cap is not None else 1 << 62
    per_position = stats.accepted_per_position
    full = probs[:k]
    verified = [0] * (k + 2)  # verifies of k drafts by tokens advanced (accepted + 1)
    left = start_left = request.max_tokens - request.output
    computed = start_computed = request.computed
    limit = request.blocks * size  # token slots of the blocks held
    tokens: list[int] = []
    add = tokens.append
    shapes: list[Shape] = []
    durations: list[float] = []
    frees: list[int] = []
    free = pool.free
    k1 = k + 1
    taken = drafted = verifies = 0
    sums: list[int] = []  # contexts of the steps that verify k drafts below the cap
    ended = False
    # Those steps come first (the tokens left only shrink, the context only grows) and
    # take the short loop; the steps near the end or at the cap follow.
    while left > k and computed < big:
        if computed + k1 > limit:
            need = -(-(computed + k1 - limit) // size)
            if need > free:
                ended = True
                break
            limit += need * size
            free -= need
            taken += need
        advance = 1  # the sampled token, then each accepted draft
        for p in full:
            if draw() >= p:
                break
            advance += 1
        verified[advance] += 1
        sums.append(computed)
        computed += advance
        left -= advance
        add(advance)
        frees.append(free)
        if stop is not None:
            durations.append(pricer.duration_s(0, 1, 0, sums[-1], sums[-1], []))
            if stop(durations[-1]):
                ended = True
                break
    drafted = k * len(sums)
    verifies = len(sums)
    while left and not ended:
        planned = k1 if left > k else left
        need = 0
        if computed + planned > limit:
            need = -(-(computed + planned - limit) // size)
            if need > free:
                break
            limit += need * size
        attended = computed if computed < big else big
        advance = 1
        if planned > 1:
            drafts = planned - 1
            for position, p in enumerate(probs[:drafts]):
                if draw() >= p:
                    break
                advance += 1
                per_position[position] += 1
            drafted += drafts
            verifies += 1
            shape = (0, 1, 0, attended, computed)
        else:
            shape = (1, 0, attended, 0, computed)
        computed += advance
        left -= advance  # never below 0: a step plans at most the tokens left
        add(advance)
        free -= need
        taken += need
        frees.append(free)
        if stop is None:
            shapes.append(shape)
        else:
            durations.append(pricer.duration_s(*shape, []))
            if stop(durations[-1]):
                break
    if not frees:
        return None
    if stop is None:
        durations = pricer.verify_durations_s(1, sums) + pricer.window_durations_s(shapes)
    for advance in range(2, k + 2):
        for position in range(advance - 1):
            per_position[position] += verified[advance]
    request.computed = computed
    request.output = request.max_tokens - left
    request.blocks = limit // size
    pool.take(taken)
    steps = len(frees)
    stats.steps += steps
    stats.generation_tokens += start_left - left
    if drafted:
        stats.drafts += verifies
        stats.draft_tokens += drafted
        stats.accepted_tokens += computed - start_computed - steps
    total = model.num_gpu_blocks
    done = () if left else (request.id,)
    return DecodeWindow(durations, [1 - f / total for f in frees], (request.id,), [tokens], done)
