"""Tests of the simulator's deterministic text: tokenizer, prompts, answers, tool arguments."""

from __future__ import annotations

import ast
import json
import pickle
import random
from pathlib import Path

import jsonschema
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from servekit.errors import SimulationError
from servekit.sim._schema_args import arguments_for
from servekit.sim.chat import Message, ToolSpec, choose_tool, render_chat, thinking_enabled
from servekit.sim.textgen import MARKERS, Answer, AnswerRequest, generate_pieces, plan_answer
from servekit.sim.tokenizer import (
    VOCABULARY,
    count_tokens,
    detokenize,
    iter_pieces,
    split_pieces,
    token_id,
    tokenize,
)

SIM = Path(__file__).resolve().parents[2] / "src" / "servekit" / "sim"
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "location": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["location", "unit", "days"],
    },
)
SCHEMAS: list[dict[str, object]] = [
    WEATHER.parameters,  # type: ignore[list-item]
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 3, "maxLength": 12},
            "limit": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 5},
            "score": {"type": "number", "minimum": -1.5, "maximum": 1.5},
            "exact": {"type": "boolean"},
            "tags": {
                "type": "array",
                "items": {"enum": ["a", "b", "c"]},
                "minItems": 2,
                "maxItems": 3,
                "uniqueItems": True,
            },
            "filter": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "op": {"const": "eq"}},
                "required": ["field", "op"],
                "additionalProperties": False,
            },
            "when": {"type": "string", "format": "date"},
            "maybe": {"type": ["null", "integer"], "multipleOf": 5, "minimum": 10},
        },
        "required": ["query", "limit", "score", "exact", "tags", "filter", "when", "maybe"],
        "additionalProperties": False,
    },
    {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}},
                            "required": ["x"]}},
        "type": "object",
        "properties": {
            "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1},
            "mode": {"anyOf": [{"type": "null"}, {"type": "string", "enum": ["fast", "slow"]}]},
            "both": {"allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]},
            ]},
        },
        "required": ["points", "mode", "both"],
    },
]  # fmt: skip


def _plan(**kwargs: object) -> AnswerRequest:
    base: dict[str, object] = {"prompt": "<|user|>\nhello\n", "max_tokens": 40}
    base["context_left"] = 1000
    return AnswerRequest(**{**base, **kwargs})  # type: ignore[arg-type]


def _texts(answer: Answer) -> dict[str, str]:
    """The whole answer's text per kind, read in one chunk."""
    return {s.kind: s.text for s in answer.reader().take(answer.tokens)}


@given(st.text(max_size=200))
def test_pieces_rejoin_to_the_text(text: str) -> None:
    """Splitting any text into token pieces loses nothing; the lazy split is the same."""
    assert "".join(split_pieces(text)) == text
    assert list(iter_pieces(text)) == split_pieces(text)


@given(st.integers(min_value=0, max_value=2**63), st.integers(min_value=0, max_value=300))
def test_generated_text_retokenizes_to_its_length(seed: int, n: int) -> None:
    """n generated pieces re-tokenize to exactly n tokens, without any model marker."""
    text = "".join(generate_pieces(seed, n))
    assert count_tokens(text) == n
    assert not any(marker in text for marker in MARKERS)
    assert detokenize(tokenize(text)) == text


def test_token_ids_are_stable_known_answers() -> None:
    """Token ids come from BLAKE2, the same in every process and Python version."""
    assert tokenize("Hello, world") == [token_id("Hello"), token_id(","), token_id(" world")]
    assert token_id(" world") == 1007792032
    assert len(set(VOCABULARY.values())) == len(VOCABULARY)  # no id collisions


def test_detokenize_rejects_unknown_ids_unless_known() -> None:
    """Ids outside the generated vocabulary need the caller's table of seen pieces."""
    ids = tokenize("zyzzyva!")
    with pytest.raises(SimulationError, match="not in the simulator's vocabulary"):
        detokenize(ids)
    assert detokenize(ids, dict(zip(ids, split_pieces("zyzzyva!"), strict=True))) == "zyzzyva!"


def test_render_chat_counts_tools_and_tool_calls() -> None:
    """Tools and earlier tool calls lengthen the rendered prompt."""
    messages = [Message("user", "weather in Paris?")]
    plain = count_tokens(render_chat(messages))
    with_tools = count_tokens(render_chat(messages, [WEATHER]))
    follow = [*messages, Message("assistant", "", '[{"id": "1"}]'), Message("tool", "sunny")]
    assert with_tools > plain
    assert count_tokens(render_chat(follow, [WEATHER])) > with_tools
    assert render_chat(messages).endswith("<|assistant|>\n")


def test_greedy_answers_depend_only_on_the_prompt() -> None:
    """Temperature 0 ignores the request seed; temperature > 0 mixes it in."""
    assert plan_answer(_plan(seed=1)) == plan_answer(_plan(seed=2))
    assert plan_answer(_plan(temperature=0.8, seed=1)) != plan_answer(
        _plan(temperature=0.8, seed=2)
    )
    assert plan_answer(_plan(temperature=0.8, seed=1)) == plan_answer(
        _plan(temperature=0.8, seed=1)
    )
    assert plan_answer(_plan(prompt="other")) != plan_answer(_plan())


def test_thinking_spends_a_quarter_on_reasoning() -> None:
    """With thinking, the first 25% of max_tokens (at least 1, at most n-1) is reasoning."""
    answer = plan_answer(_plan(thinking=True))
    assert (answer.reasoning_tokens, answer.content_tokens, answer.finish_reason) == (
        10,
        30,
        "length",
    )
    assert [
        plan_answer(_plan(thinking=True, max_tokens=n)).reasoning_tokens for n in (1, 2, 3)
    ] == [
        0,
        1,
        1,
    ]
    assert plan_answer(_plan()).reasoning_tokens == 0
    texts = _texts(answer)
    assert (count_tokens(texts["reasoning"]), count_tokens(texts["content"])) == (10, 30)


def test_answer_without_max_tokens_stops_by_itself() -> None:
    """No max_tokens: default length (>= min_tokens, <= context left), finish "stop"."""
    answer = plan_answer(_plan(max_tokens=None, default_tokens=50))
    assert (answer.tokens, answer.finish_reason) == (50, "stop")
    assert split_pieces(_texts(answer)["content"])[-1] == "."
    assert plan_answer(_plan(max_tokens=None, default_tokens=50, min_tokens=70)).tokens == 70
    assert plan_answer(_plan(max_tokens=None, default_tokens=50, context_left=20)).tokens == 20
    assert plan_answer(_plan(max_tokens=None, ignore_eos=True)).finish_reason == "length"
    with pytest.raises(SimulationError):
        plan_answer(_plan(max_tokens=None, context_left=0))


def test_thinking_follows_the_request_over_the_default() -> None:
    """thinking_mode from the request wins; no reasoning parser means no thinking."""
    on = {"thinking_mode": "enabled"}
    off = {"thinking_mode": "disabled"}
    assert thinking_enabled("minimax_m3", on, None)
    assert not thinking_enabled("minimax_m3", on, off)
    assert thinking_enabled("minimax_m3", None, on)
    assert not thinking_enabled("minimax_m3", None, None)
    assert not thinking_enabled(None, on, on)


def test_choose_tool_by_choice_mention_and_turn() -> None:
    """Named choice wins; auto picks the mentioned tool; a tool result turn gets text."""
    other = ToolSpec("search", {"type": "object"})
    ask = [Message("user", "use search please")]
    assert choose_tool([WEATHER, other], "auto", ask) == other
    assert choose_tool([WEATHER, other], None, [Message("user", "hi")]) == WEATHER
    assert choose_tool([WEATHER, other], "get_weather", ask) == WEATHER
    assert choose_tool([WEATHER, other], "none", ask) is None
    assert (
        choose_tool([WEATHER], "auto", [*ask, Message("assistant"), Message("tool", "x")]) is None
    )
    follow_up = [*ask, Message("assistant"), Message("tool", "x")]
    assert choose_tool([WEATHER], "required", follow_up) == WEATHER
    assert choose_tool([], "auto", ask) is None
    with pytest.raises(SimulationError, match="nope"):
        choose_tool([WEATHER], "nope", ask)


@settings(max_examples=60)
@given(st.integers(min_value=0, max_value=2**32), st.sampled_from(range(len(SCHEMAS))))
@example(seed=2810, index=1)  # unique tags from a 3-value enum once drew one value 8 times
def test_arguments_validate_against_their_schema(seed: int, index: int) -> None:
    """Generated arguments satisfy enum, bounds, lengths, nesting, $ref, anyOf and allOf."""
    value = arguments_for(SCHEMAS[index], random.Random(seed))
    jsonschema.validate(value, SCHEMAS[index])


def test_arguments_survive_malformed_schemas() -> None:
    """A schema with wrong-typed keywords still yields a value instead of an exception."""
    bad: dict[str, object] = {"type": "object", "properties": {"a": {"minimum": "x"}, "b": 3}}
    rng = random.Random(0)
    assert isinstance(arguments_for(bad, rng), dict)
    assert isinstance(arguments_for({"$ref": "#/missing"}, rng), str)


def test_tool_answer_is_the_call_or_truncated() -> None:
    """A tool answer ends with "tool_calls", or "length" when max_tokens cuts the call."""
    full = plan_answer(_plan(tool=WEATHER, thinking=True))
    assert full.finish_reason == "tool_calls"
    assert full.tool_name == "get_weather"
    assert full.reasoning_tokens == 10
    args = "".join(full.tool_pieces)
    jsonschema.validate(json.loads(args), WEATHER.parameters)
    assert count_tokens(args) == len(full.tool_pieces)
    cut = plan_answer(_plan(tool=WEATHER, max_tokens=4))
    assert (cut.tokens, cut.finish_reason) == (4, "length")


def test_segments_split_a_chunk_at_the_kind_change() -> None:
    """A chunk straddling reasoning and content becomes two segments; garbage replaces text."""
    answer = plan_answer(_plan(thinking=True))
    reader = answer.reader()
    reader.take(8)
    segments = reader.take(4)
    assert [(s.kind, s.tokens, s.first) for s in segments] == [
        ("reasoning", 2, False),
        ("content", 2, True),
    ]
    assert segments[1].text == "".join(generate_pieces(answer.content_seed, 2))
    garbage_reader = answer.reader()
    garbage_reader.take(8)
    garbage = garbage_reader.take(4, garbage=True)
    assert all("\x00" in s.text and "\ufffd" in s.text for s in garbage)


@settings(max_examples=60)
@given(
    st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=40),
    st.booleans(),
    st.sampled_from([None, 3, 60, 200]),
)
def test_lazy_text_is_the_same_however_it_is_chunked(
    chunks: list[int], thinking: bool, max_tokens: int | None
) -> None:
    """Reading an answer in any chunk sizes gives the same text as reading it whole."""
    answer = plan_answer(_plan(thinking=thinking, max_tokens=max_tokens, default_tokens=90))
    reader = answer.reader()
    parts: dict[str, str] = {}
    sizes = iter(chunks * (answer.tokens // len(chunks) + 1))
    while reader.delivered < answer.tokens:
        for segment in reader.take(next(sizes)):
            parts[segment.kind] = parts.get(segment.kind, "") + segment.text
    assert parts == _texts(answer)
    assert sum(count_tokens(text) for text in parts.values()) == answer.tokens


def test_lazy_text_matches_the_seeded_generator() -> None:
    """An answer's text is exactly the pieces of its seeds (the same tokens as before)."""
    answer = plan_answer(_plan(thinking=True, max_tokens=300, temperature=0.5, seed=4))
    texts = _texts(answer)
    assert texts["reasoning"] == "".join(generate_pieces(answer.reasoning_seed, 75))
    assert texts["content"] == "".join(generate_pieces(answer.content_seed, 225))
    assert generate_pieces(7, 40) == generate_pieces(7, 400)[:40]


def test_a_huge_answer_plan_holds_no_text() -> None:
    """max_tokens=130000 plans in O(1) memory; the text is only generated as it is read."""
    answer = plan_answer(_plan(thinking=True, max_tokens=130_000, context_left=131_000))
    assert answer.tokens == 130_000
    assert len(pickle.dumps(answer)) < 1_000
    reader = answer.reader()
    first = reader.take(4)
    assert [(s.kind, s.tokens) for s in first] == [("reasoning", 4)]


@pytest.mark.parametrize(
    "module",
    ["textgen.py", "tokenizer.py", "chat.py", "_schema_args.py", "faults.py", "_openai.py"],
)
def test_core_modules_import_no_io(module: str) -> None:
    """The simulator's text, fault and wire-format modules stay pure (no asyncio/aiohttp)."""
    tree = ast.parse((SIM / module).read_text(encoding="utf-8"))
    names = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    names |= {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    assert not names & {"aiohttp", "asyncio", "click", "rich", "socket", "prometheus_client"}
