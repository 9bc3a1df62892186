"""Trace replay against the live simulator (servekit.bench.replay and the runner's replay
point): prompts of exact lengths whose shared hash ids reach the server's prefix cache,
sends at the trace's timestamps, and a run invalid when the client cannot keep up."""

from __future__ import annotations

import asyncio
import json
import random
import re
import string
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from servekit.analyze.traffic import ScheduleBound, schedule_block, schedule_warning
from servekit.bench.replay import (
    BlockTexts,
    TracePrompts,
    Vocabulary,
    trace_prompts,
)
from servekit.bench.requests import plan_requests
from servekit.bench.runner import run_points
from servekit.bench.spec import BenchSpec, PointOutcome, PointSpec
from servekit.bench.store import RecordWriter
from servekit.cli.main import cli
from servekit.client.endpoint import open_endpoint
from servekit.records import RequestRecord
from servekit.workload.synthetic import words
from servekit.workload.traces import Trace, TraceRequest, implied_hits

pytestmark = pytest.mark.integration

PROFILE = "llama-3.1-70b-4xh100"  # no EAGLE drafts: hits are whole blocks of the prompt
MODEL = "Llama-3.1-70B-Instruct"
SERVER_BLOCK = 16  # the profile's KV block (vLLM's default block size)
BLOCK = 64  # tokens per hash id in the test traces


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    """A live `servekit sim serve` of the profile, 50x real time, on a free port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "servekit", "sim", "serve", "--profile", PROFILE, "--port", "0",
         "--time-scale", "0.02", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        yield str(json.loads(proc.stdout.readline())["url"])
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def prefix_counters(url: str) -> tuple[float, float]:
    """The simulator's prefix-cache queries and hits counters (tokens)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as reply:  # noqa: S310
        text = reply.read().decode()

    def value(name: str) -> float:
        match = re.search(rf"^{name}_total(?:{{[^}}]*}})? (\S+)$", text, re.M)
        assert match, name
        return float(match.group(1))

    return value("vllm:prefix_cache_queries"), value("vllm:prefix_cache_hits")


def shared_trace(count: int, gap_s: float) -> Trace:
    """Half the requests share their first full blocks (two when they have them), a
    quarter start with an earlier request's full blocks; a last block is partial or full
    and always its own (as Mooncake's hashes make it)."""
    rng = random.Random(7)
    requests: list[TraceRequest] = []
    for i in range(count):
        blocks = 2 + i % 3
        input_len = (blocks - 1) * BLOCK + rng.randint(1, BLOCK)
        fresh = iter(range(1000 * (i + 1), 1000 * (i + 2)))
        if i % 2 == 0:
            shared: tuple[int, ...] = (1, 2)[: blocks - 1]
        elif i % 4 == 1 and i >= 4:
            earlier = requests[i - 4].hash_ids or ()
            shared = earlier[: min(blocks, len(earlier)) - 1]  # its full blocks only
        else:
            shared = ()
        ids = (*shared, *(next(fresh) for _ in range(blocks - len(shared))))
        requests.append(TraceRequest(round(i * gap_s, 6), input_len, 4 + i % 3, ids, i + 1))
    return Trace("test.jsonl", "mooncake", tuple(requests), block_tokens=BLOCK)


def replay(
    url: str, trace: Trace, out: Path, **options: object
) -> tuple[list[RequestRecord], PointOutcome]:
    """Replay a trace as bench's one trace point; its records and outcome."""
    spec = BenchSpec(url, MODEL, trace=trace, **options)  # type: ignore[arg-type]
    offsets = tuple(r.offset_s for r in trace.requests)
    point = PointSpec("trace", rate_rps=len(offsets) / max(offsets[-1], 1e-3),
                      schedule=offsets, requests=len(offsets))  # fmt: skip
    with RecordWriter(out) as writer:
        run = asyncio.run(run_points(spec, [point], writer))
    assert run.stopped is None
    (outcome,) = run.outcomes
    return outcome.records, outcome


def test_replay_sends_exact_prompts_at_the_trace_times(sim_url: str, tmp_path: Path) -> None:
    """Every request is sent once, its prompt has exactly input_len tokens as the server
    counted them, its send is scheduled at exactly the trace's offset, and the server's
    prefix-cache hits match the trace's implied hits within one server block per request."""
    trace = shared_trace(24, 0.02)
    queries0, hits0 = prefix_counters(sim_url)
    # token ids asked for without the probe, whose prompt the counters would also count
    records, outcome = replay(sim_url, trace, tmp_path, warmup=2, input_len=32, token_ids=True)
    queries1, hits1 = prefix_counters(sim_url)
    by_index = {int(r.id.rpartition("-")[2]): r for r in records}
    assert sorted(by_index) == list(range(24))
    assert all(r.ok for r in records)
    assert [by_index[i].prompt_tokens for i in range(24)] == [r.input_len for r in trace.requests]
    assert [by_index[i].output_tokens for i in range(24)] == [r.output_len for r in trace.requests]
    first = by_index[0].scheduled_ns
    assert [by_index[i].scheduled_ns - first for i in range(24)] == [
        int(r.offset_s * 1e9) for r in trace.requests
    ]
    assert queries1 - queries0 == sum(r.input_len for r in trace.requests) + 2 * 32
    implied = sum(implied_hits(trace))
    assert implied > 0
    assert abs(hits1 - hits0 - implied) <= SERVER_BLOCK * len(trace.requests)
    schedule = schedule_block(records, ScheduleBound(24, 10.0))
    assert (schedule.planned, schedule.sent, schedule.lag_ms.count) == (24, 24, 24)
    assert not any("prompt length" in w for w in outcome.warnings)
    assert all(r.sent_ns >= r.scheduled_ns for r in records)


@pytest.mark.parametrize(("gap_s", "cap"), [(0.0, 4), (1 / 5000, None)])
def test_a_trace_faster_than_the_client_is_invalid(
    sim_url: str, tmp_path: Path, gap_s: float, cap: int | None
) -> None:
    """200 requests at one timestamp with at most 4 in flight, or at 5000 requests/s: the
    sends fall far behind the trace and the point is invalid, naming the p99 lag and the
    bound; every send is accounted for."""
    requests = tuple(TraceRequest(i * gap_s, 32, 2, None, line=i + 1) for i in range(200))
    trace = Trace("burst.jsonl", "jsonl", requests)
    spec = BenchSpec(sim_url, MODEL, trace=trace, max_schedule_lag_ms=5.0)
    offsets = tuple(r.offset_s for r in requests)
    point = PointSpec("trace", rate_rps=5000.0, schedule=offsets, requests=200,
                      max_concurrency=cap)  # fmt: skip
    with RecordWriter(tmp_path) as writer:
        run = asyncio.run(run_points(spec, [point], writer))
    (outcome,) = run.outcomes
    assert outcome.client is not None
    assert not outcome.client.valid
    late = [w for w in outcome.warnings if "(--max-schedule-lag-ms)" in w]
    assert len(late) == 1
    assert "ms is over the 5 ms allowed" in late[0]
    schedule = schedule_block(outcome.records, ScheduleBound(200, 5.0))
    assert (schedule.planned, schedule.sent) == (200, 200)
    assert not schedule.valid
    assert (schedule.lag_ms.p99 or 0.0) > 5.0
    assert late[0] == schedule_warning(schedule)  # as the summary says it: one warning
    assert all(r.prompt_tokens == 32 for r in outcome.records)


def test_equal_ids_give_equal_text_and_cuts_are_prefixes() -> None:
    """A block's words depend only on its id; a cut block is the start of the full one."""
    vocab = Vocabulary(("a", "bb", "c"), (1, 2, 1), 0)
    blocks = BlockTexts(vocab, 10, seed=3)
    full = blocks.prompt_words((7, 8), 20, random.Random(1))
    cut = blocks.prompt_words((7, 8), 15, random.Random(2))
    assert sum(vocab.counts[w] for w in full) == 20
    assert sum(vocab.counts[w] for w in cut) == 15
    assert blocks.text(full).startswith(blocks.text(blocks.block(7)))
    assert blocks.text(cut)[: len(blocks.text(blocks.block(7)))] == blocks.text(blocks.block(7))
    assert BlockTexts(vocab, 10, seed=3).block(8) == blocks.block(8)


def test_a_prompt_that_cannot_be_exact_is_named(sim_url: str, tmp_path: Path) -> None:
    """A chat prompt shorter than the chat template is named in the counting method and
    the point warns with its trace line; the others are exact."""
    requests = (
        TraceRequest(0.0, 100, 2, (1, 2), line=1),
        TraceRequest(0.01, 4, 2, (3,), line=2),  # the simulator's template alone is 11
    )
    trace = Trace("short.jsonl", "mooncake", requests, block_tokens=BLOCK)
    records, outcome = replay(sim_url, trace, tmp_path)
    assert sorted(r.prompt_tokens for r in records) == [12, 100]
    assert any(
        "1 request(s) reached the server with another prompt length" in w
        and "trace line 2: 12 tokens, not 4" in w
        for w in outcome.warnings
    )


def test_planning_names_the_inexact_prompt_and_the_method(sim_url: str) -> None:
    """trace_prompts counts with the server and names the prompt it could not size."""
    requests = (TraceRequest(0.0, 70, 2, (1, 2)), TraceRequest(0.0, 4, 2, (3,), line=9))

    async def plan() -> TracePrompts:
        async with open_endpoint(sim_url) as endpoint:
            spec = BenchSpec(sim_url, MODEL)
            return await trace_prompts(endpoint, spec, requests, BLOCK)

    planned = asyncio.run(plan())
    assert planned.method == "server /tokenize"
    assert planned.problems == [
        "trace line 9: its prompt counts 12 tokens, not input_len 4 (the prompt's template "
        "and special tokens alone count 11)"
    ]


class _NoTokenize:
    """An endpoint without /tokenize: the local tokenizer.json counts."""

    async def tokenize(self, body: object, *, timeout_s: float) -> int | None:
        """No count, as from a server without the route."""
        return None


def test_byte_level_bpe_prompts_are_exact_and_share_whole_blocks(tmp_path: Path) -> None:
    """With a byte-level BPE tokenizer (trained here: a space and a letter are one token,
    every syllable two), every prompt counts exactly input_len, odd lengths too, and two
    requests that share their first two ids share exactly two blocks of tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=296, initial_alphabet=alphabet, show_progress=False)
    letters = random.Random(1).choices(string.ascii_lowercase, k=20000)
    tok.train_from_iterator([" ".join(letters), words(3000, random.Random(2))], trainer)
    tok.save(str(tmp_path / "tok.json"))
    rng = random.Random(3)
    requests = []
    for i in range(40):
        blocks = 3 + i % 2
        ids = (1, 2) if i % 2 else ()
        ids += tuple(range(100 * i, 100 * i + blocks - len(ids)))
        requests.append(TraceRequest(0.0, 2 * BLOCK + rng.randint(1, BLOCK), 1, ids, i + 1))
    spec = BenchSpec(
        "http://127.0.0.1:9", "m", api="completions", tokenizer=str(tmp_path / "tok.json")
    )
    planned = asyncio.run(trace_prompts(_NoTokenize(), spec, requests, BLOCK))  # type: ignore[arg-type]
    assert planned.method == "local tokenizer.json"
    assert planned.problems == []
    ids = [tok.encode(p, add_special_tokens=False).ids for p in planned.prompts]
    assert [len(t) for t in ids] == [r.input_len for r in requests]
    a, b = ids[1], ids[3]
    assert a[: 2 * BLOCK] == b[: 2 * BLOCK]
    assert a[2 * BLOCK] != b[2 * BLOCK] or a[2 * BLOCK + 1] != b[2 * BLOCK + 1]


def test_plain_trace_prompts_share_no_prefix_with_the_warmup() -> None:
    """A trace without hash ids after two warmup requests: the warmup prompts come from the
    run's seeded RNG and the trace's from their own stream, so no trace prompt shares its
    first 16 words (tokens, counted one word per token here) with a warmup prompt."""
    requests = tuple(TraceRequest(0.1 * i, 40, 2, None, i + 1) for i in range(4))
    trace = Trace("plain.jsonl", "burstgpt", requests)
    spec = BenchSpec("http://127.0.0.1:9", "m", api="completions", trace=trace, warmup=2)
    planned, _ = asyncio.run(
        plan_requests(_NoTokenize(), spec, 6, random.Random(spec.seed))  # type: ignore[arg-type]
    )
    heads = [tuple(p.body["prompt"].split()[:16]) for p in planned]
    warm, replayed = heads[:2], heads[2:]
    assert all(len(h) == 16 for h in heads)
    assert not set(warm) & set(replayed)
    assert len(set(replayed)) == 4


def test_bench_trace_summary_hit_rate_matches_the_trace(sim_url: str, tmp_path: Path) -> None:
    """`servekit bench --trace` on a Mooncake file written here: the summary's schedule
    block accounts for every send and the server's hit tokens match the implied ones within
    one server block per request (another seed than the other tests: fresh block text)."""
    trace = shared_trace(24, 0.02)
    lines = [
        json.dumps({"timestamp": round(r.offset_s * 1000, 3), "input_length": r.input_len,
                    "output_length": r.output_len, "hash_ids": list(r.hash_ids or ())})
        for r in trace.requests
    ]  # fmt: skip
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(cli, [
        "bench", "--url", sim_url, "--trace", str(tmp_path / "trace.jsonl"),
        "--trace-format", "mooncake", "--trace-block-tokens", str(BLOCK), "--warmup", "0",
        "--seed", "1", "--out", str(tmp_path / "run"), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (point,) = json.loads((tmp_path / "run" / "summary.json").read_text())["points"]
    assert (point["schedule"]["planned"], point["schedule"]["sent"]) == (24, 24)
    cache = point["prefix_cache"]
    assert cache["server_queried_tokens"] == sum(r.input_len for r in trace.requests)
    implied = sum(implied_hits(trace))
    assert abs(cache["server_hit_tokens"] - implied) <= SERVER_BLOCK * len(trace.requests)
    assert cache["implied_hit_rate"] == pytest.approx(implied / cache["server_queried_tokens"])


def test_a_request_over_the_servers_max_model_len_is_refused_before_sending(
    sim_url: str, tmp_path: Path
) -> None:
    """Without a profile the server's /v1/models max_model_len is the bound: the first
    request over it is named by its trace line, exit 2, and no request is sent."""
    row = {"timestamp": 0, "input_length": 200_000, "output_length": 8, "hash_ids": []}
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 8, "hash_ids": [1]}, row]
    for item in rows:
        item["hash_ids"] = list(range(-(-int(item["input_length"]) // BLOCK)))
    (tmp_path / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    result = CliRunner().invoke(cli, [
        "bench", "--url", sim_url, "--trace", str(tmp_path / "long.jsonl"),
        "--trace-block-tokens", str(BLOCK), "--out", str(tmp_path / "run"),
    ])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "long.jsonl:2: 200000 input + 8 output = 200008 tokens exceeds the server's" in (
        result.output
    )
    assert not (tmp_path / "run" / "records.jsonl").exists()
