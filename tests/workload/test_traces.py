"""Tests of trace parsing, windowing, scaling and the prefix reuse a trace implies."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servekit.errors import UsageError
from servekit.workload.traces import (
    Trace,
    TraceRequest,
    implied_hit_rate,
    implied_hits,
    load_trace,
)

BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def mooncake(*rows: tuple[float, int, int, list[int]]) -> str:
    """Mooncake JSONL text of (timestamp ms, input, output, hash ids) rows."""
    return "".join(
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
        for t, i, o, h in rows
    )


def servekit_jsonl(*rows: tuple[float, int, int]) -> str:
    """servekit JSONL text of (timestamp s, input, output) rows."""
    return "".join(
        json.dumps({"timestamp_s": t, "input_len": i, "output_len": o}) + "\n" for t, i, o in rows
    )


def errors(text: str, fmt: str, **options: object) -> str:
    """The one-line message load_trace raises for a bad trace."""
    with pytest.raises(UsageError) as caught:
        load_trace(text, "t", fmt, **options)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)
    return caught.value.message


# ---- the four formats


def test_mooncake_times_are_milliseconds_from_the_first_request() -> None:
    """Mooncake timestamps are milliseconds; offsets start at the first request."""
    trace = load_trace(
        mooncake((1000, 600, 10, [7, 8]), (1000, 100, 5, [9]), (3500, 1024, 20, [7, 8])),
        "m.jsonl",
        "mooncake",
    )
    assert [r.offset_s for r in trace.requests] == [0.0, 0.0, 2.5]
    assert trace.requests[0] == TraceRequest(0.0, 600, 10, (7, 8), 1)
    assert (trace.file, trace.format, trace.block_tokens, trace.skipped) == (
        "m.jsonl",
        "mooncake",
        512,
        0,
    )


def test_burstgpt_rows_and_failed_requests() -> None:
    """BurstGPT: seconds, Request/Response tokens; failed rows (0 response) are skipped."""
    text = BURST_HEADER + (
        "10,ChatGPT,120,0,120,Conversation log\n"
        "12.5,GPT-4,300,40,340,API log\n"
        "\n"
        "14,ChatGPT,80,9,89,Conversation log\n"
    )
    trace = load_trace(text, "b.csv", "burstgpt")
    assert trace.requests == (
        TraceRequest(0.0, 300, 40, None, 3),
        TraceRequest(1.5, 80, 9, None, 5),
    )
    assert (trace.skipped, trace.block_tokens) == (1, None)


def test_azure_datetimes_with_seven_fraction_digits() -> None:
    """Azure TIMESTAMPs are datetimes with up to 7 fraction digits (any count parses)."""
    text = AZURE_HEADER + (
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.0805900,396,109\n"
        "2023-11-17 00:00:00,10,1\n"
        "2023-11-17T00:00:00.5Z,10,1\n"
    )
    trace = load_trace(text, "a.csv", "azure")
    offsets = [r.offset_s for r in trace.requests]
    assert offsets[0] == 0.0
    assert offsets[1] == pytest.approx(3.4, abs=1e-6)
    assert offsets[2] == pytest.approx(5 * 3600 + 44 * 60 + 13.31941, abs=1e-6)
    assert offsets[3] - offsets[2] == pytest.approx(0.5)
    assert [(r.input_len, r.output_len) for r in trace.requests[:2]] == [(374, 44), (396, 109)]


def test_azure_time_zones_and_bad_dates() -> None:
    """A zone offset is honoured; an impossible date names the line and field."""
    text = AZURE_HEADER + "2024-05-10 00:00:00+00:00,5,5\n2024-05-10 02:00:01+02:00,5,5\n"
    assert load_trace(text, "a", "azure").requests[1].offset_s == pytest.approx(1.0)
    message = errors(AZURE_HEADER + "2023-02-30 10:00:00,5,5\n", "azure")
    assert message == "t:2: TIMESTAMP '2023-02-30 10:00:00' is not a valid date and time"
    message = errors(AZURE_HEADER + "yesterday,5,5\n", "azure")
    assert message.startswith("t:2: TIMESTAMP 'yesterday' is not a date and time like")


def test_servekit_jsonl_with_optional_hash_ids() -> None:
    """servekit's JSONL: seconds and lengths, hash ids optional."""
    text = servekit_jsonl((0.25, 100, 10)) + json.dumps(
        {"timestamp_s": 1.0, "input_len": 20, "output_len": 3, "hash_ids": [4, 5]}
    )
    trace = load_trace(text, "s.jsonl", "jsonl", block_tokens=16)
    assert trace.requests == (
        TraceRequest(0.0, 100, 10, None, 1),
        TraceRequest(0.75, 20, 3, (4, 5), 2),
    )
    assert trace.block_tokens == 16
    assert load_trace(servekit_jsonl((0, 1, 1)), "s", "jsonl").block_tokens is None


def test_crlf_and_bom_are_accepted() -> None:
    """Windows line ends and a UTF-8 byte-order mark do not break parsing."""
    text = "\ufeff" + BURST_HEADER.replace("\n", "\r\n") + "0,ChatGPT,5,5,10,API log\r\n"
    assert load_trace(text, "b", "burstgpt").requests == (TraceRequest(0.0, 5, 5, None, 2),)


# ---- window, scale, cap


def test_window_scale_and_cap() -> None:
    """The window is taken on unscaled times, offsets restart at its first request, then
    scale; --max-requests keeps the first ones."""
    text = servekit_jsonl(*[(float(t), 10, 1) for t in range(10)])  # t = 0..9 s
    trace = load_trace(text, "s", "jsonl", start_s=2.5, duration_s=4.0, time_scale=0.5)
    assert [r.line for r in trace.requests] == [4, 5, 6, 7]  # t = 3, 4, 5, 6
    assert [r.offset_s for r in trace.requests] == [0.0, 0.5, 1.0, 1.5]
    assert (trace.start_s, trace.duration_s, trace.time_scale) == (2.5, 4.0, 0.5)
    capped = load_trace(text, "s", "jsonl", start_s=2.5, max_requests=2)
    assert [r.line for r in capped.requests] == [4, 5]


def test_window_end_is_exclusive() -> None:
    """A request exactly at start + duration is outside the window."""
    text = servekit_jsonl((0, 1, 1), (1, 1, 1), (2, 1, 1))
    assert len(load_trace(text, "s", "jsonl", duration_s=2.0).requests) == 2


def test_reading_stops_at_the_window_end() -> None:
    """Lines after the window (even broken ones) are not read: a big file costs its window."""
    text = servekit_jsonl((0, 1, 1), (5, 1, 1)) + "not json at all\n"
    assert len(load_trace(text, "s", "jsonl", duration_s=1.0).requests) == 1
    assert len(load_trace(text, "s", "jsonl", max_requests=2).requests) == 2


def test_empty_file_and_empty_window() -> None:
    """An empty file and a window holding no request say so, naming the window."""
    assert errors("\n\n", "jsonl") == "t holds no requests"
    assert errors(BURST_HEADER, "burstgpt") == "t holds no requests"
    text = servekit_jsonl((0, 1, 1), (8.5, 1, 1))
    assert errors(text, "jsonl", start_s=10.0, duration_s=5.0) == (
        "t: no request in the window [10 s, 15 s) of a trace that spans 0 to 8.5 s"
    )
    assert errors(text, "jsonl", start_s=9.0) == (
        "t: no request in the window [9 s, end) of a trace that spans 0 to 8.5 s"
    )


def test_unknown_format_and_bad_options() -> None:
    """An unknown format and impossible window options are usage errors."""
    assert errors("", "parquet") == (
        "trace format 'parquet' is not one of mooncake, burstgpt, azure, jsonl"
    )
    text = servekit_jsonl((0, 1, 1))
    assert errors(text, "jsonl", time_scale=0.0).startswith("--time-scale 0.0 must be")
    assert errors(text, "jsonl", time_scale=math.inf).startswith("--time-scale inf must be")
    assert errors(text, "jsonl", start_s=-1.0).startswith("--trace-start -1.0 must be")
    assert errors(text, "jsonl", duration_s=0.0).startswith("--trace-duration 0.0 must be")
    assert errors(text, "jsonl", max_requests=0).startswith("--max-requests 0 must be")


# ---- bad files name the line and the field


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"input_length": 5, "output_length": 5, "hash_ids": [0]}', "t:2: timestamp is missing"),
        (
            '{"timestamp": "soon", "input_length": 5, "output_length": 5, "hash_ids": [0]}',
            "t:2: timestamp 'soon' is not a number",
        ),
        (
            '{"timestamp": true, "input_length": 5, "output_length": 5, "hash_ids": [0]}',
            "t:2: timestamp True is not a number",
        ),
        (
            '{"timestamp": NaN, "input_length": 5, "output_length": 5, "hash_ids": [0]}',
            "t:2: not JSON (holds NaN, which is not a JSON number)",
        ),
        (
            '{"timestamp": -3, "input_length": 5, "output_length": 5, "hash_ids": [0]}',
            "t:2: timestamp -3 is negative",
        ),
        ('{"timestamp": 5, "output_length": 5, "hash_ids": [0]}', "t:2: input_length is missing"),
        (
            '{"timestamp": 5, "input_length": 5.5, "output_length": 5, "hash_ids": [0]}',
            "t:2: input_length 5.5 is not a whole number",
        ),
        (
            '{"timestamp": 5, "input_length": 5, "output_length": 0, "hash_ids": [0]}',
            "t:2: output_length 0 must be positive",
        ),
        ('{"timestamp": 5, "input_length": 5, "output_length": 5}', "t:2: hash_ids is missing"),
        (
            '{"timestamp": 5, "input_length": 5, "output_length": 5, "hash_ids": ["a"]}',
            "t:2: hash_ids must be a list of integers",
        ),
        (
            '{"timestamp": 5, "input_length": 513, "output_length": 5, "hash_ids": [0]}',
            "t:2: hash_ids holds 1 id but input_length 513 is 2 blocks of 512 tokens",
        ),
        ("[1, 2]", "t:2: each line must be a JSON object"),
    ],
)
def test_mooncake_bad_lines(line: str, message: str) -> None:
    """Each bad Mooncake field is one error naming the line and the field."""
    good = mooncake((0, 5, 5, [0]))
    assert errors(good + line + "\n", "mooncake") == message


def test_not_json_names_the_line() -> None:
    """A line that is not JSON names its line."""
    assert errors(servekit_jsonl((0, 1, 1)) + "{oops\n", "jsonl").startswith("t:2: not JSON (")


def test_unsorted_timestamps_name_both_lines() -> None:
    """A timestamp earlier than the one before names both lines."""
    text = mooncake((0, 5, 5, [0]), (20, 5, 5, [1]), (10, 5, 5, [2]))
    assert errors(text, "mooncake") == (
        "t:3: timestamp 10 is before line 2's 20: the trace is not sorted by time"
    )
    burst = BURST_HEADER + "5,ChatGPT,1,1,2,API log\n4.5,ChatGPT,1,1,2,API log\n"
    assert errors(burst, "burstgpt") == (
        "t:3: Timestamp 4.5 is before line 2's 5: the trace is not sorted by time"
    )


def test_lengths_over_max_model_len() -> None:
    """A request longer than max_model_len names the line, both lengths and the limit."""
    text = servekit_jsonl((0, 100, 10), (1, 2000, 100))
    assert errors(text, "jsonl", max_model_len=2048) == (
        "t:2: input_len 2000 + output_len 100 = 2100 tokens exceeds max_model_len 2048"
    )
    assert len(load_trace(text, "t", "jsonl", max_model_len=2100).requests) == 2
    # outside the window it is not replayed, so not refused
    assert len(load_trace(text, "t", "jsonl", max_model_len=2048, max_requests=1).requests) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "Timestamp,Model,Request tokens\n1,x,5\n",
            "t:1: no 'Response tokens' column in the header "
            "('Timestamp', 'Model', 'Request tokens')",
        ),
        (BURST_HEADER + "1,ChatGPT,5\n", "t:2: Response tokens is missing"),
        (BURST_HEADER + "1,ChatGPT,0,5,5,API log\n", "t:2: Request tokens 0 must be positive"),
        (BURST_HEADER + "1,ChatGPT,5,-1,4,API log\n", "t:2: Response tokens -1 must be positive"),
        (
            BURST_HEADER + "1,ChatGPT,5,2.5,4,API log\n",
            "t:2: Response tokens '2.5' is not a whole number",
        ),
        (BURST_HEADER + "-1,ChatGPT,5,5,10,API log\n", "t:2: Timestamp -1 is negative"),
        (BURST_HEADER + "inf,ChatGPT,5,5,10,API log\n", "t:2: Timestamp 'inf' is not a number"),
    ],
)
def test_burstgpt_bad_rows(text: str, message: str) -> None:
    """Each bad BurstGPT cell names the line and the column."""
    assert errors(text, "burstgpt") == message


def test_azure_bad_rows() -> None:
    """Azure columns are named in errors like the other formats."""
    assert errors(AZURE_HEADER + "2023-11-16 18:15:46,0,5\n", "azure") == (
        "t:2: ContextTokens 0 must be positive"
    )
    assert errors(AZURE_HEADER + "2023-11-16 18:15:46,5,0\n", "azure") == (
        "t:2: GeneratedTokens 0 must be positive"
    )


def test_only_failed_rows_is_an_empty_window() -> None:
    """A BurstGPT window of failed rows alone has nothing to send, and says why."""
    text = BURST_HEADER + "0,ChatGPT,5,0,5,API log\n"
    assert errors(text, "burstgpt") == (
        "t: no request in the window [0 s, end) of a trace that spans 0 to 0 s "
        "(1 failed row skipped)"
    )


# ---- implied prefix reuse


def trace_of(*requests: tuple[int, tuple[int, ...] | None], block: int = 4) -> Trace:
    """A trace of (input_len, hash_ids) requests, `block` tokens per id."""
    return Trace(
        "t",
        "mooncake",
        tuple(TraceRequest(float(i), n, 1, ids) for i, (n, ids) in enumerate(requests)),
        block_tokens=block,
    )


def test_implied_hits_hand_computed() -> None:
    """Hits are the leading chain seen before, in full blocks, capped at input_len - 1."""
    trace = trace_of(
        (12, (1, 2, 3)),  # cold: 0
        (16, (1, 2, 3, 4)),  # chain 1,2,3 seen: 12
        (12, (1, 2, 3)),  # whole prompt seen: capped at 11
        (10, (1, 2, 9)),  # 1,2 seen (8), 9 new: 8
        (8, (5, 2)),  # chain starts with 5: a 2 that follows another id is no hit: 0
        (6, (1, 7)),  # 1 seen: 4
        (9, (1, 2, 9)),  # 1,2,9 seen but 9 was partial before (10 tokens = 2.5 blocks): 8
        (7, None),  # no ids: 0
    )
    assert implied_hits(trace) == [0, 12, 11, 8, 0, 4, 8, 0]
    assert implied_hit_rate(trace) == pytest.approx(43 / 80)


def test_a_partial_block_shares_its_tokens() -> None:
    """A partial block is the start of the full one: a later request shares its tokens,
    and an identical request shares all but its last token."""
    trace = trace_of((6, (1, 2)), (8, (1, 2, 3)), (9, (1, 2, 3)), (9, (1, 2, 3)))
    assert implied_hits(trace) == [0, 6, 8, 8]
    assert implied_hits(trace, granule=4) == [0, 4, 8, 8]
    assert implied_hits(trace, granule=3) == [0, 6, 6, 6]


def test_implied_hit_rate_without_hash_ids_is_none() -> None:
    """A trace whose requests carry no hash ids implies nothing."""
    assert implied_hit_rate(trace_of((5, None), (5, None))) is None


def test_half_the_requests_share_two_blocks() -> None:
    """The issue's case: 10 requests of 4 blocks, every other one sharing its first two."""
    rows = []
    for i in range(10):
        head = [0, 1] if i % 2 == 0 else [100 + 4 * i, 101 + 4 * i]
        rows.append((i * 100, 2048, 16, [*head, 200 + 4 * i, 201 + 4 * i]))
    trace = load_trace(mooncake(*rows), "m", "mooncake")
    assert implied_hits(trace) == [0, 0, 1024, 0, 1024, 0, 1024, 0, 1024, 0]
    assert implied_hit_rate(trace) == pytest.approx(4 * 1024 / (10 * 2048))


@given(
    st.lists(st.tuples(st.integers(1, 40), st.lists(st.integers(0, 3), max_size=10)), max_size=12)
)
def test_implied_hits_invariants(rows: list[tuple[int, list[int]]]) -> None:
    """Hits stay below input_len, the first request hits nothing, a repeated request shares
    every token its ids cover (but its last), and a granule rounds each hit down."""
    block = 4
    requests = [(max(n, len(ids) * block - block + 1) if ids else n, tuple(ids)) for n, ids in rows]
    trace = trace_of(*requests, block=block)
    hits = implied_hits(trace)
    for (n, _), hit in zip(requests, hits, strict=True):
        assert 0 <= hit <= n - 1
    if hits:
        assert hits[0] == 0
    for granule in (1, 3, 16):
        assert implied_hits(trace, granule=granule) == [h // granule * granule for h in hits]
    again = implied_hits(trace_of(*requests, *requests, block=block))
    assert all(
        second == (min(n - 1, len(ids) * block) if ids else 0)
        for (n, ids), second in zip(requests, again[len(requests) :], strict=True)
    )


# ---- the sample files in examples/traces

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def example(name: str, fmt: str) -> Trace:
    """A sample trace parsed by the real parser."""
    return load_trace((EXAMPLES / name).read_text(encoding="utf-8"), name, fmt)


def test_mooncake_example_implied_hit_rate() -> None:
    """The Mooncake sample: 40 requests over 14.75 s; its hit rate worked out by hand.

    16 requests share a 2-block system prompt (ids 0, 1; 1324 tokens each): 15 hit 1024.
    One session of 4 turns (ids 10 / 10,12 / 10,12,14 growing): 0, 512, 1024, 1536.
    20 unrelated requests of 600 or 1000 tokens: 0. Hits 15 * 1024 + 3072 = 18432 of
    16 * 1324 + 6300 + 16000 = 43484 prompt tokens.
    """
    trace = example("mooncake.jsonl", "mooncake")
    assert len(trace.requests) == 40
    assert trace.requests[-1].offset_s == pytest.approx(14.75)
    assert all(r.input_len + r.output_len <= 2048 for r in trace.requests)
    hits = implied_hits(trace)
    assert sorted(h for h in hits if h) == [512, *[1024] * 16, 1536]
    assert sum(hits) == 18432
    assert sum(r.input_len for r in trace.requests) == 43484
    assert implied_hit_rate(trace) == pytest.approx(18432 / 43484)


def test_servekit_jsonl_example() -> None:
    """The servekit JSONL sample: 12 requests over 7.5 s, hits worked out by hand."""
    trace = example("servekit.jsonl", "jsonl")
    assert len(trace.requests) == 12
    assert trace.requests[-1].offset_s == 7.5
    assert implied_hits(trace) == [0, 1024, 0, 1024, 0, 0, 1536, 0, 512, 0, 1024, 0]
    assert implied_hit_rate(trace) == pytest.approx(5120 / 10423)


def test_burstgpt_and_azure_examples() -> None:
    """The CSV samples: BurstGPT's 15 rows hold 2 failed ones; Azure's 12 span 18 s."""
    burst = example("burstgpt.csv", "burstgpt")
    assert (len(burst.requests), burst.skipped) == (13, 2)
    assert burst.requests[-1].offset_s == 21.0
    assert sum(r.input_len for r in burst.requests) == 7446
    assert implied_hit_rate(burst) is None
    azure = example("azure.csv", "azure")
    assert len(azure.requests) == 12
    assert azure.requests[-1].offset_s == pytest.approx(18.0, abs=1e-6)
    assert azure.requests[3].offset_s == pytest.approx(4.8317556, abs=1e-6)
    assert sum(r.input_len for r in azure.requests) == 7562


def test_hash_ids_count_error_for_one_block() -> None:
    """A one-block prompt with two ids says so in the singular."""
    text = mooncake((0, 400, 5, [1, 2]))
    assert errors(text, "mooncake") == (
        "t:1: hash_ids holds 2 ids but input_length 400 is 1 block of 512 tokens"
    )
