"""Dynamic speculative decoding: the schedule's check and expansion, and the engine using it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import batch_size_schedules, tiny_model  # type: ignore[import-not-found]

from servekit.errors import SimulationError
from servekit.profiles import load_profile
from servekit.sim.build import build_engine
from servekit.sim.dynamic_sd import dynamic_sd_lookup
from servekit.sim.engine import Engine, EngineLimits, SimRequest, StepResult
from servekit.sim.offline import LoadPoint, run_point
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.sim.step_time import step_time_s

Make = Callable[..., Engine]

# Every draft accepted: a verifying step gains k + 1 tokens, so draft counts are exact.
ALL_ACCEPTED = AcceptanceParams(((0.0, (1.0, 1.0, 1.0)),))
SCHEDULE = [(1, 2, 3), (3, 128, 0)]  # draft 3 at batch sizes 1-2, nothing from 3 up
LOOKUP = dynamic_sd_lookup(SCHEDULE, max_num_seqs=64, num_speculative_tokens=3)
M3 = "minimax-m3-mxfp8-8xa800"
KEY = "speculative.config.num_speculative_tokens_per_batch_size"


@pytest.mark.parametrize(
    ("schedule", "max_num_seqs", "k", "expected"),
    [
        ([(1, 2, 3), (3, 128, 0)], 8, 3, (0, 3, 3, 0, 0, 0, 0, 0, 0)),
        # a gap (5-8) carries the range before it, the tail (17-20) the last range
        ([(1, 4, 3), (9, 16, 1)], 20, 3, (0, *[3] * 8, *[1] * 12)),
        # k above num_speculative_tokens is capped
        ([(1, 2, 5), (3, 4, 1)], 6, 2, (0, 2, 2, 1, 1, 1, 1)),
        # ranges in any order
        ([(5, 8, 0), (1, 4, 2)], 10, 3, (0, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0)),
        # max_num_seqs inside a range, and ranges past it
        ([(1, 100, 2)], 4, 3, (0, 2, 2, 2, 2)),
        ([(1, 2, 1), (10, 20, 3)], 5, 3, (0, 1, 1, 1, 1, 1)),
    ],
)
def test_lookup_known_answers(
    schedule: list[tuple[int, int, int]], max_num_seqs: int, k: int, expected: tuple[int, ...]
) -> None:
    """The dense table fills ranges, carries k over gaps and the tail, and caps k."""
    got = dynamic_sd_lookup(schedule, max_num_seqs=max_num_seqs, num_speculative_tokens=k)
    assert got == expected


@pytest.mark.parametrize(
    ("schedule", "max_num_seqs", "k", "message"),
    [
        ([], 8, 3, "num_speculative_tokens_per_batch_size is empty"),
        ([(1, 2)], 8, 3, r"entry \[1, 2\] has 2 numbers, not 3"),
        ([(0, 4, 3)], 8, 3, r"range \[0, 4, 3\] has a batch size below 1"),
        ([(1, 4, 3), (6, 5, 1)], 8, 3, r"\[6, 5, 1\] starts at batch size 6, after its end 5"),
        ([(1, 4, -1)], 8, 3, r"range \[1, 4, -1\] has k -1"),
        ([(1, 4, 3), (4, 8, 1)], 8, 3, r"\[1, 4, 3\] and \[4, 8, 1\] overlap at batch size 4"),
        ([(2, 4, 3)], 8, 3, "starts at batch size 2, so smaller batches have no k"),
        ([(1, 4, 3)], 0, 3, "max_num_seqs 0 leaves no batch size"),
        ([(1, 4, 3)], 8, 0, "needs num_speculative_tokens of 1 or more, not 0"),
    ],
)
def test_invalid_schedules_are_refused(
    schedule: list[tuple[int, ...]], max_num_seqs: int, k: int, message: str
) -> None:
    """Each schedule vLLM refuses at start raises one SimulationError naming it, with a fix."""
    with pytest.raises(SimulationError, match=message) as caught:
        dynamic_sd_lookup(schedule, max_num_seqs=max_num_seqs, num_speculative_tokens=k)
    assert caught.value.fix


@pytest.mark.vllm
def test_lookup_equals_vllms() -> None:
    """On random schedules, valid or not, the table equals vLLM's own expansion, and the
    schedules vLLM refuses are the ones refused here."""
    rng = random.Random(7)
    cases = []
    for _ in range(3000):
        schedule = [
            [rng.randint(-1, 30), rng.randint(-1, 30), rng.randint(-1, 6)]
            for _ in range(rng.randint(0, 4))
        ]
        if rng.random() < 0.6:  # mostly valid ones: ranges from 1 with gaps
            schedule, first = [], 1
            for _ in range(rng.randint(1, 4)):
                last = first + rng.randint(0, 9)
                schedule.append([first, last, rng.randint(0, 6)])
                first = last + 1 + rng.randint(0, 4)
            rng.shuffle(schedule)
        cases.append((schedule, rng.randint(1, 40), rng.randint(1, 5)))
    script = (
        "import json, sys\n"
        "from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup\n"
        "out = []\n"
        "for schedule, seqs, k in json.load(sys.stdin):\n"
        "    try:\n"
        "        out.append(build_dynamic_sd_schedule_lookup(schedule, seqs, k))\n"
        "    except ValueError:\n"
        "        out.append(None)\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=json.dumps(cases), capture_output=True,
        text=True, timeout=300, check=True,
    )  # fmt: skip
    theirs = json.loads(done.stdout.splitlines()[-1])
    ours: list[list[int] | None] = []
    for schedule, seqs, k in cases:
        try:
            ours.append(
                list(dynamic_sd_lookup(schedule, max_num_seqs=seqs, num_speculative_tokens=k))
            )
        except SimulationError:
            ours.append(None)
    assert ours == theirs
    assert 0 < sum(t is None for t in theirs) < len(cases)


def _observed(engine: Engine) -> list[StepResult]:
    """Wrap the engine's step() so every step's result is kept (no decode windows then)."""
    seen: list[StepResult] = []
    inner = engine.step

    def watching() -> StepResult:
        result = inner()
        seen.append(result)
        return result

    engine.step = watching  # type: ignore[method-assign]
    return seen


def test_closed_loop_at_concurrency_2_verifies_3_drafts_per_step(make_engine: Make) -> None:
    """At batch size 2 every decode step verifies 3 drafts per request: 8 requests of 41
    tokens (1 from the prefill, then 10 steps of 3 drafts + 1) make 80 drafts of 3."""
    engine = make_engine(k=3, lookup=LOOKUP, acceptance=ALL_ACCEPTED)
    run_point(engine, LoadPoint("c=2", 8, 100, 41, concurrency=2), random.Random(0))
    stats = engine.stats
    assert (stats.drafts, stats.draft_tokens, stats.accepted_tokens) == (80, 240, 240)
    assert stats.accepted_per_position == [80, 80, 80]
    assert stats.generation_tokens == 8 * 41
    assert stats.steps == 4 * 11  # four pairs: a prefill step and 10 verifying steps


def test_closed_loop_at_concurrency_8_drafts_nothing(make_engine: Make) -> None:
    """At batch size 8 the schedule gives k 0: no draft is proposed or counted, and every
    decode step is a plain decode of one token per request."""
    engine = make_engine(k=3, lookup=LOOKUP, acceptance=ALL_ACCEPTED)
    seen = _observed(engine)
    run_point(engine, LoadPoint("c=8", 16, 100, 41, concurrency=8), random.Random(0))
    stats = engine.stats
    assert (stats.drafts, stats.draft_tokens, stats.accepted_tokens) == (0, 0, 0)
    assert stats.accepted_per_position == [0, 0, 0]
    assert stats.steps == 2 * 41
    decodes = [r.batch for r in seen if not r.batch.prefill_chunks]
    assert len(decodes) == 2 * 40
    assert all(len(b.decode_contexts) == 8 and not b.verify_contexts for b in decodes)
    assert all(r.drafted == 0 and r.batch.num_speculative_tokens == 0 for r in seen)


def test_a_shrinking_batch_resumes_drafting_on_the_step_after(make_engine: Make) -> None:
    """When a batch of 3 (k 0) loses a request, the first step at 2 still decodes plainly
    (its drafts were proposed after a step of 3); the step after verifies 3 drafts."""
    engine = make_engine(k=3, lookup=LOOKUP, acceptance=ALL_ACCEPTED)
    for rid, max_tokens in (("a", 200), ("b", 200), ("c", 3)):
        engine.add(SimRequest(rid, prompt_tokens=50, max_tokens=max_tokens))
    steps = [engine.step() for _ in range(5)]
    assert [len(s.batch.prefill_chunks) for s in steps] == [3, 0, 0, 0, 0]
    assert steps[2].finished == ("c",)
    assert [len(s.batch.decode_contexts) for s in steps[1:]] == [3, 3, 2, 0]
    assert [len(s.batch.verify_contexts) for s in steps[1:]] == [0, 0, 0, 2]
    assert [s.drafted for s in steps] == [0, 0, 0, 0, 6]
    assert steps[4].gained == (("a", 4), ("b", 4))
    assert steps[4].batch.num_speculative_tokens == 3


def test_a_growing_batch_stops_drafting_on_the_step_after(make_engine: Make) -> None:
    """Two drafting requests verify their 3 drafts in the step that admits a third; from
    the step after (batch 3, k 0) they decode plainly."""
    engine = make_engine(k=3, lookup=LOOKUP, acceptance=ALL_ACCEPTED)
    engine.add(SimRequest("a", prompt_tokens=50, max_tokens=200))
    engine.add(SimRequest("b", prompt_tokens=50, max_tokens=200))
    engine.step()
    engine.add(SimRequest("c", prompt_tokens=50, max_tokens=200))
    admitting, after = engine.step(), engine.step()
    assert len(admitting.batch.verify_contexts) == 2
    assert admitting.batch.prefill_chunks == ((50, 0),)
    assert admitting.drafted == 6
    assert after.batch.verify_contexts == ()
    assert len(after.batch.decode_contexts) == 3
    assert after.gained == (("a", 1), ("b", 1), ("c", 1))


def test_steps_are_priced_by_the_drafts_they_verify() -> None:
    """A step of the schedule is priced as step_time_s prices its batch: a plain decode step
    (k 0) with decode_request_ms and no draft passes, a verifying one with its k."""
    model = tiny_model()
    priced = StepTimeParams(5.0, 0.6, 0.4, 0.1, 0.7, 1.1, 1.5, 0.2)
    engine = Engine(
        model, EngineLimits(64, 2048, 3, LOOKUP), priced, ALL_ACCEPTED, random.Random(0)
    )
    for rid, max_tokens in (("a", 200), ("b", 200), ("c", 3)):
        engine.add(SimRequest(rid, prompt_tokens=50, max_tokens=max_tokens))
    steps = [engine.step() for _ in range(6)]
    for s in steps:
        assert s.duration_s == pytest.approx(step_time_s(s.batch, model, priced), rel=1e-12)
    plain, verifying = steps[3].batch, steps[4].batch
    assert (plain.num_speculative_tokens, len(plain.decode_contexts), plain.verify_contexts) == (
        0, 2, ()
    )  # fmt: skip
    assert (verifying.num_speculative_tokens, len(verifying.verify_contexts)) == (3, 2)
    passes = 3 * (1.5 + 0.2 * 2) / 1000
    assert steps[4].duration_s - steps[3].duration_s > passes


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    n=st.integers(1, 40),
    blocks=st.integers(40, 400),
    seqs=st.integers(1, 16),
    budget=st.integers(64, 1024),
    k=st.integers(1, 3),
    seed=st.integers(0, 10_000),
)
def test_requests_and_tokens_are_conserved_under_any_schedule(
    make_engine: Make,
    data: st.DataObject,
    n: int,
    blocks: int,
    seqs: int,
    budget: int,
    k: int,
    seed: int,
) -> None:
    """With a random schedule every request finishes with exactly max_tokens, blocks
    return, and the draft counters add up (no step verifies more than k drafts)."""
    schedule = data.draw(batch_size_schedules())
    lookup = dynamic_sd_lookup(schedule, max_num_seqs=seqs, num_speculative_tokens=k)
    engine = make_engine(blocks=blocks, seqs=seqs, budget=budget, k=k, seed=seed, lookup=lookup)
    rng = random.Random(seed)
    wanted = {}
    for i in range(n):
        req = SimRequest(str(i), rng.randint(1, 200), rng.randint(1, 100), rng.random())
        wanted[req.id] = req.max_tokens
        engine.add(req)
    got: dict[str, int] = {}
    for _ in range(200_000):
        if engine.idle:
            break
        result = engine.step()
        assert result.drafted <= len(result.batch.verify_contexts) * k
        for rid, tokens in result.gained:
            got[rid] = got.get(rid, 0) + tokens
    assert engine.idle
    assert got == wanted
    assert engine.free_blocks == blocks
    stats = engine.stats
    assert stats.generation_tokens == sum(wanted.values())
    assert sum(stats.accepted_per_position) == stats.accepted_tokens <= stats.draft_tokens
    assert stats.drafts <= stats.draft_tokens <= k * stats.drafts
    if not any(lookup):
        assert stats.draft_tokens == 0


def test_profile_schedule_reaches_the_engine() -> None:
    """The profile's schedule becomes the engine's lookup over max_num_seqs; without one, or
    with an empty one or data parallelism (vLLM drops it then), k is fixed."""
    on = build_engine(load_profile(M3, overrides=(f"{KEY}=[[1,2,3],[3,128,0]]",)))
    assert on.limits.num_speculative_tokens == 3
    assert on.limits.dynamic_sd_lookup == (0, 3, 3, *[0] * 126)
    assert build_engine(load_profile(M3)).limits.dynamic_sd_lookup is None
    empty = build_engine(load_profile(M3, overrides=(f"{KEY}=[]",)))
    assert empty.limits.dynamic_sd_lookup is None
    parallel = load_profile(
        M3,
        overrides=(f"{KEY}=[[1,2,3]]", "tensor_parallel_size=4", "data_parallel_size=2"),
    )
    # (the weights do not fit 4 GPUs: the KV pool is given)
    assert build_engine(parallel, num_gpu_blocks=1000).limits.dynamic_sd_lookup is None


def test_profile_with_an_invalid_schedule_is_refused() -> None:
    """build_engine refuses a schedule vLLM would refuse, naming the ranges."""
    profile = load_profile(M3, overrides=(f"{KEY}=[[1,4,3],[3,8,0]]",))
    with pytest.raises(SimulationError, match=r"\[1, 4, 3\] and \[3, 8, 0\] overlap"):
        build_engine(profile)


def test_engine_refuses_a_lookup_it_cannot_use() -> None:
    """An EngineLimits lookup of the wrong length, above k, or without k is refused."""
    accept = ALL_ACCEPTED
    for limits in (
        EngineLimits(4, 2048, 3, (0, 3, 3)),
        EngineLimits(2, 2048, 3, (0, 3, 4)),
        EngineLimits(2, 2048, 0, (0, 0, 0)),
    ):
        with pytest.raises(SimulationError, match="dynamic_sd_lookup has"):
            Engine(tiny_model(), limits, StepTimeParams(1.0, 0.5, 0.5), accept, random.Random(0))
