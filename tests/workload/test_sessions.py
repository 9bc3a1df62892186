"""Tests of session sources: delays, ShareGPT and JSONL conversations, synthetic sessions."""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
from pathlib import Path

import jsonschema
import pytest

from servekit.bench.summary import session_info
from servekit.errors import UsageError
from servekit.workload.datasets import LengthSpec
from servekit.workload.sessions import (
    Delay,
    SessionPlan,
    SessionsSpec,
    Turn,
    draw_delay,
    parse_conversations,
    parse_delay,
    session_plan,
    session_rng,
    synthetic_sessions,
)
from servekit.workload.tools import parse_tools


def conversations(text: str, **options: object) -> list[SessionPlan]:
    """parse_conversations with a default output length of 99."""
    return parse_conversations(text, "c", default_output_len=99, **options)  # type: ignore[arg-type]


def refusal(text: str) -> str:
    """The one-line message of a bad conversations file."""
    with pytest.raises(UsageError) as caught:
        conversations(text)
    return caught.value.message


def test_parse_delay_forms() -> None:
    """S, S:exponential and S:uniform parse; the spelling round-trips."""
    assert parse_delay("2", "--think-time") == Delay(2.0)
    assert parse_delay("0.5:exponential", "--think-time") == Delay(0.5, "exponential")
    assert parse_delay("3:uniform", "--tool-latency") == Delay(3.0, "uniform")
    assert parse_delay("0", "--think-time").spelling == "0"
    assert parse_delay("0.5:exponential", "--think-time").spelling == "0.5:exponential"


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "2:gamma", "soon", "", "1:"])
def test_parse_delay_refusals_name_the_flag(text: str) -> None:
    """A negative, non-finite or unknown delay names the flag and the value."""
    with pytest.raises(UsageError) as caught:
        parse_delay(text, "--tool-latency")
    assert caught.value.message == (
        f"--tool-latency {text!r} is not S, S:exponential or S:uniform with S 0 or more seconds"
    )


def test_draw_delay_distributions() -> None:
    """Fixed is exact; exponential and uniform have the stated mean and range."""
    rng = random.Random(3)
    assert draw_delay(Delay(1.5), rng) == 1.5
    assert draw_delay(Delay(0.0, "exponential"), rng) == 0.0
    uniform = [draw_delay(Delay(2.0, "uniform"), rng) for _ in range(4000)]
    assert min(uniform) >= 1.0
    assert max(uniform) <= 3.0
    assert statistics.fmean(uniform) == pytest.approx(2.0, abs=0.05)
    exponential = [draw_delay(Delay(2.0, "exponential"), rng) for _ in range(4000)]
    assert min(exponential) >= 0
    assert statistics.fmean(exponential) == pytest.approx(2.0, rel=0.08)
    again = random.Random(3)
    assert draw_delay(Delay(1.5), again) == 1.5
    assert draw_delay(Delay(0.0, "exponential"), again) == 0.0
    assert draw_delay(Delay(2.0, "uniform"), again) == uniform[0]  # same seed, same draws


def test_sharegpt_every_turn_and_system() -> None:
    """ShareGPT: every human turn is a turn, the next gpt turn's words its output length."""
    doc = [
        {
            "id": "x1",
            "conversations": [
                {"from": "system", "value": "Be terse."},
                {"from": "human", "value": "Hi there"},
                {"from": "gpt", "value": "Hello, how can I help?"},
                {"from": "human", "value": "Tell me more"},
                {"from": "gpt", "value": "More."},
                {"from": "human", "value": "Last one"},
            ],
        },
        {"conversations": [{"from": "gpt", "value": "orphan"}]},
        {"conversations": "broken"},
        {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a b"}]},
    ]
    plans = conversations(json.dumps(doc))
    assert plans == [
        SessionPlan(
            "x1",
            (Turn("Hi there", 5), Turn("Tell me more", 1), Turn("Last one", 99)),
            "Be terse.",
        ),
        SessionPlan("3", (Turn("q", 2),)),
    ]
    capped = conversations(json.dumps(doc), max_turns=2)
    assert [len(p.turns) for p in capped] == [2, 1]


def test_sharegpt_refusals() -> None:
    """A ShareGPT file that is not a list, or has no human turn, is refused."""
    assert refusal('[{"conversations": []}]') == "c holds no conversations with a user turn"
    assert refusal("[1, 2").startswith("c: not JSON (")


def test_jsonl_turns_and_messages() -> None:
    """JSONL: 'turns' lists and 'messages' lists both become sessions."""
    lines = [
        {"id": "a", "system": "S", "turns": [{"user": "one", "output_len": 7}, {"user": "two"}]},
        {
            "messages": [
                {"role": "system", "content": "Sys"},
                {"role": "user", "content": "u1"},
                {"role": "assistant", "content": "three word answer"},
                {"role": "user", "content": "u2"},
            ]
        },
    ]
    text = json.dumps(lines[0]) + "\n\n" + json.dumps(lines[1]) + "\n"
    assert conversations(text) == [
        SessionPlan("a", (Turn("one", 7), Turn("two", 99)), "S"),
        SessionPlan("3", (Turn("u1", 3), Turn("u2", 99)), "Sys"),
    ]
    assert [len(p.turns) for p in conversations(text, max_turns=1)] == [1, 1]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{oops", None),
        ("[1]", "c:2: each line must be a JSON object"),
        ('{"id": 5, "turns": [{"user": "x"}]}', "c:2: id 5 must be a non-empty string"),
        ('{"id": "a", "turns": [{"user": "x"}]}', "c:2: id 'a' is line 1's too"),
        ('{"prompt": "x"}', "c:2: needs a 'turns' or a 'messages' list"),
        (
            '{"id": "a#2", "turns": [{"user": "x"}]}',
            "c:2: id 'a#2' holds '#', which marks a repeated session's round (a#2)",
        ),
        ('{"turns": []}', "c:2: turns must be a non-empty list"),
        ('{"turns": ["hi"]}', "c:2: turns[0] must be an object"),
        (
            '{"turns": [{"user": "x"}, {"text": "y"}]}',
            "c:2: turns[1].user must be a non-empty string",
        ),
        (
            '{"turns": [{"user": "x", "output_len": 0}]}',
            "c:2: turns[0].output_len 0 must be a positive whole number",
        ),
        (
            '{"turns": [{"user": "x", "output_len": "9"}]}',
            "c:2: turns[0].output_len '9' must be a positive whole number",
        ),
        ('{"system": 3, "turns": [{"user": "x"}]}', "c:2: system must be a non-empty string"),
        ('{"messages": {}}', "c:2: messages must be a non-empty list"),
        (
            '{"messages": [{"role": "tool", "content": "x"}]}',
            "c:2: messages[0].role must be system, user or assistant",
        ),
        (
            '{"messages": [{"role": "user", "content": 3}]}',
            "c:2: messages[0].content must be a string",
        ),
        (
            '{"messages": [{"role": "assistant", "content": "x"}]}',
            "c:2: messages holds no user message",
        ),
    ],
)
def test_jsonl_bad_lines_name_line_and_field(line: str, message: str | None) -> None:
    """Each bad JSONL conversation is one error naming its line and field."""
    text = '{"id": "a", "turns": [{"user": "first"}]}\n' + line + "\n"
    got = refusal(text)
    if message is None:
        assert got.startswith("c:2: not JSON (")
    else:
        assert got == message


def test_jsonl_default_ids_that_collide_are_named_as_defaults() -> None:
    """A line without an id is named by its line number; when that is another line's id,
    the error names both lines and says which id was the default."""
    given = '{"id": "2", "turns": [{"user": "x"}]}\n{"turns": [{"user": "y"}]}\n'
    assert refusal(given) == "c:2: default id '2' (its line number) is line 1's too"
    default = '{"turns": [{"user": "x"}]}\n{"id": "1", "turns": [{"user": "y"}]}\n'
    assert refusal(default) == "c:2: id '1' is line 1's default id (its line number) too"


def test_jsonl_lines_split_at_line_feeds_only() -> None:
    """U+2028, U+0085 and a form feed inside a JSON string (written raw, as json.dumps with
    ensure_ascii off writes them) stay in the message: lines split at line feeds only."""
    odd = "one\u2028two\x85three\x0cfour"
    text = json.dumps({"turns": [{"user": odd}]}, ensure_ascii=False) + "\r\n"
    text += json.dumps({"turns": [{"user": "next"}]}) + "\n"
    assert conversations(text) == [
        SessionPlan("1", (Turn(odd, 99),)),
        SessionPlan("2", (Turn("next", 99),)),
    ]


def test_sharegpt_ids_are_made_distinct() -> None:
    """ShareGPT ids: a repeat and an index another row's id holds get the first free ~k
    suffix, "#" becomes "_", and the same file always gives the same ids."""

    def row(name: object = None) -> dict[str, object]:
        conv = [{"from": "human", "value": "q"}]
        return {"conversations": conv} if name is None else {"id": name, "conversations": conv}

    doc = [row("a"), row("a"), row(), row("2"), row("a~2"), row("x#1"), row("")]
    plans = conversations(json.dumps(doc))
    assert [p.id for p in plans] == ["a", "a~3", "2~2", "2", "a~2", "x_1", "6"]
    assert [p.id for p in conversations(json.dumps(doc))] == [p.id for p in plans]


def test_repeated_sessions_are_salted_rounds() -> None:
    """The k-th use of a plan (k >= 2) is `id#k` whose first user message starts with
    "[round k] "; later turns, the system message and synthetic turns stay as they are."""
    text = SessionPlan("a", (Turn("hi", 4), Turn("more", 4)), "S")
    synth = SessionPlan("b", (Turn(None, 4, 10),))
    plans = (text, synth)
    sent = [session_plan(plans, p) for p in range(5)]
    assert [s.id for s in sent] == ["a", "b", "a#2", "b#2", "a#3"]
    assert sent[0] is text
    assert sent[2] == SessionPlan("a#2", (Turn("[round 2] hi", 4), Turn("more", 4)), "S")
    assert sent[4].turns[0].user == "[round 3] hi"
    assert sent[3] == SessionPlan("b#2", synth.turns)


def test_repeated_counts_sessions_beyond_the_plans() -> None:
    """Three plans, two points of two sessions: one session is a repeat, as the summary's
    SessionInfo says; enough plans repeat none."""
    plans = tuple(SessionPlan(n, (Turn("x", 4),)) for n in "abc")
    spec = SessionsSpec(plans, "jsonl c", Delay(0.0), 2, points=2)
    assert spec.repeated == 1
    info = session_info(spec)
    assert info is not None
    assert info.repeated == 1
    assert dataclasses.replace(spec, points=1).repeated == 0


def test_session_rngs_depend_on_seed_and_position_only() -> None:
    """A session's delay RNG is the same for one seed and position, and differs otherwise."""
    draw = [session_rng(7, 3).random() for _ in range(2)]
    assert draw[0] == draw[1]
    assert session_rng(7, 4).random() != draw[0]
    assert session_rng(8, 3).random() != draw[0]


def test_empty_conversations_file() -> None:
    """An empty file holds no conversations."""
    assert refusal("\n") == "c holds no conversations with a user turn"


def test_synthetic_sessions() -> None:
    """Synthetic sessions: count x turns of sized turns with no text, reproducible."""
    plans = synthetic_sessions(3, 4, LengthSpec(200), LengthSpec(50, "uniform"), random.Random(1))
    assert [p.id for p in plans] == ["s1", "s2", "s3"]
    assert all(len(p.turns) == 4 and p.system is None for p in plans)
    turns = [t for p in plans for t in p.turns]
    assert all(t.user is None and t.input_len == 200 for t in turns)
    assert all(25 <= t.output_len <= 75 for t in turns)
    assert len({t.output_len for t in turns}) > 1
    assert plans == synthetic_sessions(
        3, 4, LengthSpec(200), LengthSpec(50, "uniform"), random.Random(1)
    )


# ---- the sample files in examples/sessions and examples/agent

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> list[SessionPlan]:
    """A sample conversations file parsed by the real parser (default output 128)."""
    text = (EXAMPLES / name).read_text(encoding="utf-8")
    return parse_conversations(text, name, default_output_len=128)


def test_conversations_example() -> None:
    """The JSONL sample: 4 conversations, 'turns' and 'messages' forms, word-count outputs."""
    plans = example("sessions/conversations.jsonl")
    assert [(p.id, len(p.turns)) for p in plans] == [
        ("trip-planning", 3),
        ("sql-help", 2),
        ("recipe", 3),
        ("one-question", 1),
    ]
    assert plans[0].system == "You are a concise travel assistant."
    assert [t.output_len for t in plans[0].turns] == [220, 140, 320]
    assert [t.output_len for t in plans[1].turns] == [128, 96]
    assert [t.output_len for t in plans[2].turns] == [27, 23, 128]
    assert plans[2].system == "Answer like a patient cooking teacher."


def test_sharegpt_example() -> None:
    """The ShareGPT sample: every turn of 2 conversations; the gpt-first one is left out."""
    plans = example("sessions/sharegpt-multiturn.json")
    assert [p.id for p in plans] == ["garden-1", "code-review-7"]
    assert plans[0].system == "You are a friendly gardening helper."
    assert [t.output_len for t in plans[0].turns] == [33, 13, 18]
    assert [t.output_len for t in plans[1].turns] == [20, 27]


def test_agent_examples() -> None:
    """The agent sample: one weather tool with a valid JSON schema, 6 weather tasks."""
    tools = parse_tools((EXAMPLES / "agent/tools.json").read_text(encoding="utf-8"), "tools")
    assert [t["function"]["name"] for t in tools] == ["get_weather"]
    schema = tools[0]["function"]["parameters"]
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"city": "Lisbon", "unit": "celsius"})
    assert not validator.is_valid({"unit": "kelvin"})
    tasks = example("agent/tasks.jsonl")
    assert len(tasks) == 6
    assert sum(len(t.turns) for t in tasks) == 7
    assert all(t.turns[0].user for t in tasks)
    assert all("weather" in (t.turns[0].user or "").lower() for t in tasks)
