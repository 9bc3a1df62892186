"""Agent loops in bench: tool calls answered, their arguments checked, sessions ended."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if str(Path(__file__).parent) not in sys.path:  # session_helpers sits beside this file
    sys.path.insert(0, str(Path(__file__).parent))
from session_helpers import Sim, Sweep, sim_server, sweep

from servekit.bench.sessions import assistant_message, invalid_calls, tool_validators
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.client.stream import StreamResult, ToolCall
from servekit.errors import UsageError
from servekit.workload.sessions import AgentSpec, Delay, SessionPlan, SessionsSpec, Turn

pytestmark = pytest.mark.integration
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# The simulator fills strings with words and ignores `pattern`: its arguments fail this.
ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "pattern": "^[0-9]+$"}},
            "required": ["order_id"],
        },
    },
}
RESULT = '{"temp_c": 21}'
NO_THINK = Delay(0.0)


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    """One simulator (auto tool choice on) for the module."""
    with sim_server() as server:
        yield server


def agent_run(
    sim: Sim,
    out: Path,
    users: tuple[str, ...],
    *,
    tools: tuple[dict[str, Any], ...] = (WEATHER,),
    max_turns: int = 6,
    sessions: int = 3,
    think: Delay = NO_THINK,
) -> Sweep:
    """`sessions` agent sessions of the given user turns, two at a time."""
    plans = tuple(SessionPlan(f"a{i}", tuple(Turn(u, 64) for u in users)) for i in range(sessions))
    agent = AgentSpec(tools, Delay(0.05), RESULT, max_turns)
    spec = BenchSpec(
        base_url=sim.url,
        model=sim.model,
        sessions=SessionsSpec(plans, "jsonl test", think, sessions, agent),
    )
    return sweep(spec, [PointSpec("c=2", concurrency=2)], out)


def test_agent_sessions_complete_with_tool_calls(sim: Sim, tmp_path: Path) -> None:
    """The model calls the tool, the client answers after the tool latency with the call's
    id, and the model's text answer completes the session; the tools go with every request,
    max_tokens is only a cap, and shorter answers raise no length warning."""
    run = agent_run(sim, tmp_path, ("What is the weather in Paris?",))
    (outcome,) = run.run.outcomes
    assert all("output length" not in w for w in outcome.warnings)
    sessions = run.sessions()
    assert len(sessions) == 3
    for records in sessions.values():
        facts = [(r.turn, r.tool_calls, r.tool_args_invalid, r.session_end) for r in records]
        assert facts == [(1, 1, 0, None), (2, 0, 0, "completed")]
        assert all(r.ok for r in records)
        assert records[0].output_tokens < 64
        assert records[1].scheduled_ns - records[0].end_ns >= 50_000_000
    for exchange in run.exchanges:
        body = exchange.body
        assert body["tools"] == [WEATHER]
        assert body["tool_choice"] == "auto"
        assert body["max_tokens"] == 64
        assert "ignore_eos" not in body
        assert "min_tokens" not in body
    firsts = [e for e in run.exchanges if len(e.body["messages"]) == 1]
    seconds = [e for e in run.exchanges if len(e.body["messages"]) == 3]
    assert len(firsts) == len(seconds) == 3
    sent_back = {tuple(map(str, e.body["messages"][1:])) for e in seconds}
    expected = set()
    for first in firsts:
        deltas = first.tool_calls()
        call_id = next(d["id"] for d in deltas if d.get("id"))
        arguments = "".join(d.get("function", {}).get("arguments") or "" for d in deltas)
        assistant = {
            "role": "assistant",
            "content": first.content(),
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        }
        tool = {"role": "tool", "tool_call_id": call_id, "content": RESULT}
        expected.add((str(assistant), str(tool)))
    assert sent_back == expected


def test_invalid_arguments_are_counted(sim: Sim, tmp_path: Path) -> None:
    """Arguments that fail the tool's schema (a pattern the simulator ignores) are counted
    per response; the loop still answers them and completes."""
    run = agent_run(sim, tmp_path, ("Where is my order?",), tools=(ORDER,), sessions=2)
    for records in run.sessions().values():
        facts = [(r.tool_calls, r.tool_args_invalid, r.session_end) for r in records]
        assert facts == [(1, 1, None), (0, 0, "completed")]


def test_turn_limit_counts_responses(sim: Sim, tmp_path: Path) -> None:
    """With two user turns and a limit of three responses, the session ends "turn_limit" on
    the second turn's tool call; a limit of one stops at the first response."""
    users = ("What is the weather in Paris?", "And the weather in Rome?")
    for records in agent_run(sim, tmp_path / "3", users, max_turns=3).sessions().values():
        facts = [(r.turn, r.tool_calls, r.session_end) for r in records]
        assert facts == [(1, 1, None), (2, 0, None), (3, 1, "turn_limit")]
    for records in agent_run(sim, tmp_path / "1", users, max_turns=1).sessions().values():
        assert [(r.turn, r.session_end) for r in records] == [(1, "turn_limit")]


def test_next_user_turn_follows_the_text_answer(sim: Sim, tmp_path: Path) -> None:
    """After a text answer the next user turn follows after the think time, with the tool
    round in its history; the session completes on the last user turn's text answer."""
    users = ("What is the weather in Paris?", "And the weather in Rome?")
    run = agent_run(sim, tmp_path, users, think=Delay(0.1), sessions=1)
    (records,) = run.sessions().values()
    assert [(r.tool_calls, r.session_end) for r in records] == [
        (1, None), (0, None), (1, None), (0, "completed"),
    ]  # fmt: skip
    assert records[2].scheduled_ns - records[1].end_ns >= 100_000_000
    roles = [m["role"] for m in run.exchanges[2].body["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


def test_invalid_calls_by_reason() -> None:
    """A call is invalid when its arguments are not JSON, fail the schema, or it names no
    known tool; a schema's own `$schema` draft decides how it is read; an unresolvable
    `$ref` fails the call instead of raising."""
    draft4 = {
        "type": "function",
        "function": {
            "name": "limit",
            "parameters": {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "type": "object",
                "properties": {"n": {"type": "number", "maximum": 5, "exclusiveMaximum": True}},
            },
        },
    }
    remote = {
        "type": "function",
        "function": {"name": "remote", "parameters": {"$ref": "https://example.invalid/s.json"}},
    }
    validators = tool_validators([WEATHER, draft4, remote])
    calls = [
        ToolCall(0, None, "get_weather", '{"city": "Paris"}'),
        ToolCall(1, None, "get_weather", '{"city": '),
        ToolCall(2, None, "get_weather", '{"town": "Paris"}'),
        ToolCall(3, None, "get_time", "{}"),
        ToolCall(4, None, "limit", '{"n": 4}'),
        ToolCall(5, None, "limit", '{"n": 5}'),
        ToolCall(6, None, "remote", "{}"),  # a schema that cannot be resolved never passes
    ]
    assert [invalid_calls([c], validators) for c in calls] == [0, 1, 1, 1, 0, 1, 1]
    assert invalid_calls(calls, validators) == 5


def test_a_tool_with_a_broken_schema_is_refused() -> None:
    """A tool whose parameters are not a JSON schema is one clear error naming the tool."""
    bad = {"type": "function", "function": {"name": "x", "parameters": {"type": 12}}}
    with pytest.raises(UsageError, match="tool 'x': parameters is not a valid JSON schema"):
        tool_validators([bad])


def test_calls_without_an_id_get_one() -> None:
    """The assistant message carries the streamed content and each call, with the server's
    id or, when it sent none, the one made for it."""
    result = StreamResult(content=["Let me ", "check."], reasoning=["hidden"])
    calls = [
        ToolCall(0, "srv-1", "get_weather", '{"city": "Oslo"}'),
        ToolCall(1, None, "get_weather", '{"city": "Rome"}'),
    ]
    message = assistant_message(result, calls, lambda call: f"made-{call.index}")
    assert message == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {"id": "srv-1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
            {"id": "made-1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
        ],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["bench", "sim"])
def test_a_broken_tool_schema_is_refused_before_the_run(command: str, tmp_path: Path) -> None:
    """bench and sim run refuse a tool whose parameters are not a JSON schema with one
    usage line naming the tool and the schema's problem, before a run directory exists."""
    from click.testing import CliRunner

    from servekit.cli.main import cli

    bad = [{"type": "function", "function": {"name": "w", "parameters": {"required": "city"}}}]
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(bad), encoding="utf-8")
    out = tmp_path / "run"
    head = (
        ["bench", "--url", "http://127.0.0.1:9"]
        if command == "bench"
        else ["sim", "run", "--profile", "llama-3.1-70b-4xh100"]
    )
    args = [*head, "--agent", "--tools", str(tools), "--concurrency", "1", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert (
        "tool 'w': parameters is not a valid JSON schema (parameters.required: 'city' is not "
        "of type 'array')" in result.stderr
    )
    assert not out.exists()
