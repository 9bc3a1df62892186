"""Tests of prefix caching: the block pool, the engine's hits and counters, and /metrics."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from sim_helpers import tiny_model

from servekit.errors import SimulationError
from servekit.profiles import load_profile
from servekit.sim.build import build_engine
from servekit.sim.engine import Engine, EngineLimits, SimRequest
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import StepTimeParams
from servekit.sim.prefix_cache import BlockPool, CachedBlock, block_hashes
from servekit.sim.server import make_app, make_runner
from servekit.sim.textgen import Answer, iter_answer_token_ids
from servekit.sim.tokenizer import tokenize

BS = 16
STEP = StepTimeParams(base_ms=5.0, hbm_efficiency=0.6, compute_efficiency=0.4)


class RecordingPool(BlockPool):
    """A pool that records, for every take(), the uncached free blocks before it and the
    evictions it made."""

    def __init__(self, num_blocks: int, *, caching: bool = True) -> None:
        super().__init__(num_blocks, caching=caching)
        self.takes: list[tuple[int, int, int]] = []  # (count, uncached free, evicted)

    def take(self, count: int) -> None:
        before_free, before_evicted = self.uncached_free, self.evictions
        super().take(count)
        self.takes.append((count, before_free, self.evictions - before_evicted))


class RecordingEngine(Engine):
    """An engine that records every admission: (id, tokens known, tokens hit, resumed)."""

    admissions: list[tuple[str, int, int, bool]]
    takes: list[tuple[int, int, int]]  # the RecordingPool's

    def _admit(self, request: SimRequest, budget: int) -> int | None:
        fresh = request.cached is not None and request.computed == 0
        tokens = super()._admit(request, budget)
        if tokens is not None and fresh:
            known = request.prompt_tokens + request.output
            hit = request.computed
            self.admissions.append((request.id, known, hit, request.preemptions > 0))
        return tokens


def engine(
    blocks: int = 1000,
    *,
    seqs: int = 64,
    budget: int = 2048,
    caching: bool = True,
    eagle: bool = False,
) -> RecordingEngine:
    built = RecordingEngine(
        tiny_model(blocks, BS),
        EngineLimits(seqs, budget),
        STEP,
        None,
        random.Random(0),
        enable_prefix_caching=caching,
        drop_eagle_block=eagle,
    )
    built.admissions = []
    pool = RecordingPool(blocks, caching=caching)
    built.pool, built.takes = pool, pool.takes
    return built


def drain(eng: Engine, limit: int = 100_000) -> None:
    for _ in range(limit):
        if eng.idle:
            return
        eng.step()
    raise AssertionError("engine did not drain")


def outputs_of(prompt: Sequence[int]) -> Iterator[int]:
    """Greedy-style output ids: the same prompt always gets the same answer."""
    return itertools.count(10_000 + sum(prompt) % 97)


def request(rid: str, prompt: Sequence[int], max_tokens: int = 4) -> SimRequest:
    return SimRequest(
        rid, len(prompt), max_tokens, token_ids=list(prompt), output_ids=outputs_of(prompt)
    )


def run_alone(eng: Engine, req: SimRequest) -> None:
    eng.add(req)
    drain(eng)


# ---- known answers on the engine ------------------------------------------------------------


def test_identical_second_prompt_hits_all_but_the_recomputed_tail() -> None:
    """A repeated 100-token prompt hits its 6 full blocks (96 tokens); only 4 are computed."""
    eng = engine()
    prompt = list(range(100))
    run_alone(eng, request("a", prompt))
    eng.add(request("b", prompt))
    first = eng.step()
    assert first.batch.prefill_chunks == ((4, 96),)
    drain(eng)
    assert eng.admissions == [("a", 100, 0, False), ("b", 100, 96, False)]
    assert (eng.stats.prefix_cache_queries, eng.stats.prefix_cache_hits) == (200, 96)
    assert eng.stats.prompt_tokens == 200  # vLLM counts cached prompt tokens as prompt tokens
    assert eng.free_blocks == 1000


def test_block_aligned_prompt_recomputes_its_whole_last_block() -> None:
    """A 96-token prompt (6 full blocks) hits 5: its last token needs logits, hits are
    whole blocks."""
    eng = engine()
    prompt = list(range(96))
    run_alone(eng, request("a", prompt))
    eng.add(request("b", prompt))
    assert eng.step().batch.prefill_chunks == ((16, 80),)


def test_eagle_drafts_drop_one_more_block_of_the_hit() -> None:
    """With an EAGLE-style draft the 96-token hit of a 100-token prompt shrinks to 80."""
    eng = engine(eagle=True)
    prompt = list(range(100))
    run_alone(eng, request("a", prompt))
    eng.add(request("b", prompt))
    assert eng.step().batch.prefill_chunks == ((20, 80),)


def test_shared_prefix_hits_only_its_full_blocks() -> None:
    """Two prompts sharing 40 tokens share 2 full blocks (32 tokens), not the partial third."""
    eng = engine()
    shared = list(range(40))
    run_alone(eng, request("a", [*shared, 1, 2, 3]))
    run_alone(eng, request("b", [*shared, 7, 8]))
    assert eng.admissions[-1] == ("b", 42, 32, False)


def test_output_blocks_are_cached_and_hit_by_a_resent_history() -> None:
    """A prompt re-sending an answer hits the answer's full blocks, up to its last
    computed token (the final sampled token never had its KV computed)."""
    eng = engine()
    prompt = list(range(40))
    run_alone(eng, request("a", prompt, max_tokens=40))
    answer = list(itertools.islice(outputs_of(prompt), 40))
    history = [*prompt, *answer, 5, 6, 7]  # 83 tokens; a computed 40 + 39 = 79 of them
    run_alone(eng, SimRequest("b", len(history), 2, token_ids=history))
    assert eng.admissions[-1] == ("b", 83, 64, False)


def test_without_output_ids_only_prompt_blocks_are_cached() -> None:
    """An answer whose ids are unknown leaves only the prompt's full blocks in the cache."""
    eng = engine()
    prompt = list(range(40))
    run_alone(eng, SimRequest("a", 40, 40, token_ids=prompt))
    assert eng.pool.cached == 2
    answer = list(itertools.islice(outputs_of(prompt), 40))
    history = [*prompt, *answer]
    run_alone(eng, SimRequest("b", len(history), 2, token_ids=history))
    assert eng.admissions[-1] == ("b", 80, 32, False)


def test_disabled_caching_never_hits_or_counts() -> None:
    """enable_prefix_caching off: the same prompt twice computes all of it both times."""
    eng = engine(caching=False)
    prompt = list(range(100))
    run_alone(eng, request("a", prompt))
    eng.add(request("b", prompt))
    assert eng.step().batch.prefill_chunks == ((100, 0),)
    drain(eng)
    assert (eng.stats.prefix_cache_queries, eng.stats.prefix_cache_hits) == (0, 0)
    assert eng.pool.cached == 0


def test_profile_switch_turns_caching_off() -> None:
    """serve_args.enable_prefix_caching: false reaches the engine; unset means on."""
    on = build_engine(load_profile("llama-3.1-70b-4xh100"))
    off = build_engine(
        load_profile("llama-3.1-70b-4xh100", overrides=("serve_args.enable_prefix_caching=false",))
    )
    assert (on.pool.caching, off.pool.caching) == (True, False)
    eagle = build_engine(load_profile("minimax-m3-mxfp8-8xa800"))
    assert (eagle.drop_eagle_block, on.drop_eagle_block) == (True, False)


def test_aborted_request_leaves_its_full_blocks_for_the_next() -> None:
    """Aborting a running request frees all its blocks but keeps its full ones cached."""
    eng = engine()
    prompt = list(range(70))
    eng.add(request("a", prompt, max_tokens=100))
    eng.step()
    eng.step()
    assert eng.abort("a")
    assert eng.free_blocks == 1000
    assert eng.pool.evictable == 4  # 70 prompt + 1 decoded token known: 4 full blocks
    eng.add(request("b", prompt))
    eng.step()
    assert eng.admissions[-1] == ("b", 70, 64, False)


def test_preempted_request_resumes_from_what_is_left_of_its_cached_blocks() -> None:
    """A preempted request keeps its full blocks cached; the running request's growth
    evicts them tail first, and the lookup on resume hits the survivors and counts apart
    from new requests' lookups, as vLLM's PrefixCacheStats does."""
    eng = engine(blocks=10)
    eng.add(request("a", list(range(64)), max_tokens=64))
    eng.add(request("b", list(range(100, 164)), max_tokens=64))
    drain(eng)
    assert eng.stats.preemptions == 1
    # b is preempted at 81 known tokens holding 5 full blocks; a then needs 3 more blocks
    # (at 81, 97 and 113 tokens) with none uncached, evicting b's blocks 5, 4 and 3.
    # When a finishes, b hits blocks 1-2 and takes 4 more: a's one uncached block and,
    # by eviction, a's 3 most recently freed cached blocks.
    assert eng.admissions == [("a", 64, 0, False), ("b", 64, 0, False), ("b", 81, 32, True)]
    assert (eng.stats.prefix_cache_queries, eng.stats.prefix_cache_hits) == (128, 0)
    stats = eng.stats
    assert (stats.preempted_prefix_cache_queries, stats.preempted_prefix_cache_hits) == (81, 32)
    # (blocks taken, uncached free before, evicted): b's own growth at 97 and 113 evicts too.
    assert eng.takes == [
        (4, 10, 0), (4, 6, 0), (1, 2, 0), (1, 1, 0),
        (1, 0, 1), (1, 0, 1), (1, 0, 1), (4, 1, 3), (1, 0, 1), (1, 0, 1),
    ]  # fmt: skip
    assert eng.pool.evictions == 8


def test_unscheduled_lookups_are_not_counted() -> None:
    """A request that waits for blocks is counted once, when it is finally admitted."""
    eng = engine(blocks=8)
    eng.add(request("a", list(range(100)), max_tokens=20))  # 7 blocks, then an 8th
    eng.add(request("b", list(range(200, 300)), max_tokens=2))  # 7 blocks: must wait
    for _ in range(5):
        eng.step()
        assert [a[0] for a in eng.admissions] == ["a"]
        assert eng.stats.prefix_cache_queries == 100
    drain(eng)
    assert [a[0] for a in eng.admissions] == ["a", "b"]
    assert eng.stats.prefix_cache_queries == 200


def test_token_ids_must_match_the_prompt_length() -> None:
    """A request whose token ids disagree with its prompt length is refused clearly."""
    with pytest.raises(SimulationError, match="3 token ids for 4 prompt tokens"):
        engine().add(SimRequest("a", 4, 1, token_ids=[1, 2, 3]))


def test_synthetic_load_is_the_same_with_caching_on_or_off() -> None:
    """Requests without content never hit: an offline point gives identical records."""
    point = LoadPoint("c8", requests=40, input_len=300, output_len=50, concurrency=8)
    runs = [
        run_point(engine(caching=caching), point, random.Random(1)).records
        for caching in (True, False)
    ]
    assert runs[0] == runs[1]


# ---- the pool on its own --------------------------------------------------------------------


def test_eviction_takes_the_oldest_freed_block_and_a_requests_tail_first() -> None:
    """Cached free blocks are evicted in the order they were freed, each request's last
    block first, and only once no uncached block is free."""
    pool = BlockPool(6)
    pool.take(6)
    a = [pool.cache(h) for h in (1, 2, 3)]
    b = [pool.cache(h) for h in (11, 12, 13)]
    pool.release(a, 0)
    pool.release(b, 0)
    assert (pool.uncached_free, pool.evictable) == (0, 6)
    pool.take(2)
    # a's tail (3) went first, then its 2; b is untouched.
    assert pool.longest_hit([1, 2, 3], 9) == a[:1]
    assert pool.longest_hit([11, 12, 13], 9) == b
    assert pool.longest_hit([11, 12, 13], 2) == b[:2]
    assert (pool.evictions, pool.evictable, pool.free) == (2, 4, 4)


def test_a_hit_stops_at_the_first_missing_block() -> None:
    """A run of cached blocks counts only from the start: once an early block is evicted,
    the later blocks after it are not hit."""
    pool = BlockPool(2)
    pool.take(2)
    first, second = pool.cache(1), pool.cache(2)
    pool.release([first], 0)  # freed first, so evicted first
    pool.release([second], 0)
    pool.take(1)
    assert pool.longest_hit([1, 2], 9) == []
    assert pool.longest_hit([2], 9) == [second]


def test_block_hashes_chain_so_a_changed_block_changes_every_later_one() -> None:
    """A full block's hash depends on everything before it; a partial tail has none."""
    base = list(range(50))
    other = [*base[:20], 999, *base[21:]]
    hashes, changed = block_hashes(base, BS), block_hashes(other, BS)
    assert len(hashes) == 3
    assert hashes[0] == changed[0]
    assert all(x != y for x, y in zip(hashes[1:], changed[1:], strict=True))


# ---- properties over random workloads -------------------------------------------------------


def common_full_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while (n + 1) * BS <= min(len(a), len(b)) and a[n * BS : (n + 1) * BS] == b[
        n * BS : (n + 1) * BS
    ]:
        n += 1
    return n


def check_pool(eng: Engine) -> None:
    """Blocks are conserved (a block shared by requests counts once) and every cached
    block's references are its holders."""
    pool = eng.pool
    assert all(r.blocks == 0 for r in eng.waiting)
    holders: dict[int, int] = {}
    blocks: dict[int, CachedBlock] = {}
    uncached_held = 0
    for r in eng.running:
        cached = r.cached or []
        assert len(cached) <= r.blocks
        uncached_held += r.blocks - len(cached)
        for block in cached:
            holders[id(block)] = holders.get(id(block), 0) + 1
            blocks[id(block)] = block
    assert pool.free + uncached_held + len(blocks) == pool.num_blocks
    assert all(blocks[key].refs == count for key, count in holders.items())
    assert pool.cached == pool.evictable + len(blocks)


workloads = st.lists(
    st.tuples(
        st.integers(0, 3),  # which shared prefix
        st.integers(0, 80),  # its length
        st.integers(0, 40),  # own tokens after it
        st.integers(1, 40),  # max_tokens
        st.booleans(),  # abort it after a few steps
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, st.integers(12, 40), st.booleans(), st.integers(0, 2**16))
def test_hits_never_exceed_shared_prefix_blocks_and_evict_only_under_pressure(
    work: list[tuple[int, int, int, int, bool]], blocks: int, eagle: bool, seed: int
) -> None:
    """Over random shared-prefix workloads on a small pool (with preemptions and aborts):
    every hit is whole blocks, below the request's last token, and no longer than the full
    blocks it shares with a request admitted before it; a cached block is evicted only when
    a new block is needed and no uncached one is free; blocks are conserved, reference
    counts equal their holders, and the counters are the sum of the admissions."""
    rng = random.Random(seed)
    bases = [[rng.randrange(50) for _ in range(80)] for _ in range(4)]
    eng = engine(blocks, seqs=6, budget=64, eagle=eagle)
    prompts: dict[str, list[int]] = {}
    aborts: dict[str, int] = {}
    for i, (base, shared, own, max_tokens, abort) in enumerate(work):
        prompt = [*bases[base][:shared], *(rng.randrange(50) for _ in range(own))] or [1]
        if len(prompt) + max_tokens > blocks * BS:
            continue
        prompts[str(i)] = prompt
        eng.add(request(str(i), prompt, max_tokens))
        if abort:
            aborts[str(i)] = rng.randrange(1, 6)
    for step in range(10_000):
        if eng.idle:
            break
        for rid in [r for r, at in aborts.items() if at == step]:
            eng.abort(rid)
        eng.step()
        check_pool(eng)
    assert eng.idle
    check_pool(eng)
    assert eng.free_blocks == blocks
    for count, uncached_free, evicted in eng.takes:
        assert evicted == max(0, count - uncached_free)
    seen: list[list[int]] = []
    for rid, known, hit, _ in eng.admissions:
        prompt = prompts[rid]
        tokens = [*prompt, *itertools.islice(outputs_of(prompt), known - len(prompt))]
        assert hit % BS == 0
        assert hit <= known - 1
        bound = max((common_full_blocks(tokens, other) for other in seen), default=0)
        assert hit <= bound * BS
        full = [*prompt, *itertools.islice(outputs_of(prompt), 200)]
        seen.append(full)
    new = [a for a in eng.admissions if not a[3]]
    resumed = [a for a in eng.admissions if a[3]]
    assert eng.stats.prefix_cache_queries == sum(a[1] for a in new)
    assert eng.stats.prefix_cache_hits == sum(a[2] for a in new)
    assert eng.stats.preempted_prefix_cache_queries == sum(a[1] for a in resumed)
    assert eng.stats.preempted_prefix_cache_hits == sum(a[2] for a in resumed)


@settings(max_examples=30, deadline=None)
@given(workloads, st.integers(0, 2**16))
def test_disabled_caching_gives_zero_hits_on_any_workload(
    work: list[tuple[int, int, int, int, bool]], seed: int
) -> None:
    """With prefix caching off nothing is cached, hit or counted, whatever the workload."""
    rng = random.Random(seed)
    base = [rng.randrange(50) for _ in range(80)]
    eng = engine(40, seqs=6, budget=64, caching=False)
    for i, (_, shared, own, max_tokens, _) in enumerate(work):
        eng.add(request(str(i), [*base[:shared], *range(own)] or [1], max_tokens))
    drain(eng)
    assert eng.admissions == []
    assert (eng.stats.prefix_cache_queries, eng.stats.prefix_cache_hits) == (0, 0)
    assert eng.pool.cached == eng.pool.evictions == 0


def test_answer_token_ids_are_the_ids_of_its_text() -> None:
    """The ids the engine caches for an answer are those of the text the client receives."""
    answer = Answer(30, 700, None, (), "stop", reasoning_seed=3, content_seed=4)
    ids = list(iter_answer_token_ids(answer, chunk=64))
    segments = answer.reader().take(answer.tokens)
    assert [s.kind for s in segments] == ["reasoning", "content"]
    assert len(ids) == answer.tokens == 730
    assert ids == [i for s in segments for i in tokenize(s.text)]


# ---- the live server ------------------------------------------------------------------------


async def _scrape(session: aiohttp.ClientSession, url: str) -> dict[str, tuple[str, float]]:
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    out: dict[str, tuple[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("vllm:prefix_cache"):
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    assert sample.labels == {"model_name": "Llama-3.1-70B-Instruct"}
                    out[sample.name] = (family.type, sample.value)
    return out


def _live_engine(app: web.Application) -> Engine:
    """The engine behind a simulated server's app (its handlers' server holds it)."""
    for route in app.router.routes():
        server: Any = getattr(route.handler, "__self__", None)
        if server is not None and hasattr(server, "live"):
            return server.live.engine  # type: ignore[no-any-return]
    raise AssertionError("no simulated server in the app")


@pytest.mark.integration
def test_live_metrics_count_prefix_cache_queries_and_hits_like_the_engine() -> None:
    """Over loopback HTTP: token-id prompts with shared prefixes give the hand-computed
    counters, then concurrent chats with a shared system prompt; /metrics always equals
    the engine's own counters."""

    async def body() -> None:
        app = make_app(
            load_profile("llama-3.1-70b-4xh100"), time_scale=0.02, log=lambda _line: None
        )
        runner = make_runner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        eng = _live_engine(app)
        try:
            async with aiohttp.ClientSession() as session:
                shared = list(range(1000, 1200))
                for prompt in ([*shared, 1, 2, 3], [*shared, 4, 5], [*shared, 1, 2, 3]):
                    body = {"prompt": prompt, "max_tokens": 5, "model": "Llama-3.1-70B-Instruct"}
                    async with session.post(f"{url}/v1/completions", json=body) as response:
                        assert response.status == 200
                        await response.read()
                # 203 + 202 + 203 queried; the 2nd and 3rd hit 12 full blocks (192 tokens).
                assert await _scrape(session, url) == {
                    "vllm:prefix_cache_queries_total": ("counter", 608.0),
                    "vllm:prefix_cache_hits_total": ("counter", 384.0),
                }
                system = "You are a careful assistant. " * 40
                chats = [
                    {
                        "model": "Llama-3.1-70B-Instruct",
                        "max_tokens": 8,
                        "messages": [
                            {"role": "system", "content": system},
                            {"role": "user", "content": f"Question number {i}?"},
                        ],
                    }
                    for i in range(12)
                ]

                async def send(chat: dict[str, Any]) -> None:
                    async with session.post(f"{url}/v1/chat/completions", json=chat) as r:
                        assert r.status == 200
                        await r.read()

                prompts = []
                for chat in chats:
                    messages = {"messages": chat["messages"]}
                    async with session.post(f"{url}/tokenize", json=messages) as r:
                        prompts.append((await r.json())["tokens"])
                await asyncio.gather(*(send(c) for c in chats))
                metrics = await _scrape(session, url)
                stats = eng.stats
                assert metrics == {
                    "vllm:prefix_cache_queries_total": ("counter", stats.prefix_cache_queries),
                    "vllm:prefix_cache_hits_total": ("counter", stats.prefix_cache_hits),
                }
                # Whatever the arrival order, the first chat admitted misses and each other
                # hits the full blocks of the prefix all twelve prompts share.
                shared_blocks = min(common_full_blocks(prompts[0], p) for p in prompts[1:])
                assert shared_blocks >= 10
                assert stats.prefix_cache_queries == 608 + sum(map(len, prompts))
                assert stats.prefix_cache_hits == 384 + 11 * shared_blocks * 16
        finally:
            await runner.cleanup()

    asyncio.run(asyncio.wait_for(body(), 60))
