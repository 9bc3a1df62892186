"""Send multi-turn sessions and agent loops as load points (shell, asyncio).

A session point runs `SessionsSpec.sessions_per_point` sessions, taken in order from the
run's sessions; a sweep that needs more sends them again in rounds, each repeat with its
own id and a salted first message (`workload.sessions.session_plan`). Closed loop:
`concurrency` workers each run the next session, all its turns, then the next. Open loop:
sessions start at their arrival times (`rate_rps` sessions per second), at most
`max_concurrency` at once.

Each request sends the whole history: the system message, then every earlier user message
and the assistant answer that really came back (its content, not its reasoning; in an agent
loop its tool calls too, each answered by a tool message), then the new user message. It
waits for the think time (or, after a tool call, the tool latency), drawn from the session's
own RNG, of the run's seed and the session's position in the sweep only
(`workload.sessions.session_rng`), so a run draws the same delays however its sessions
interleave and however many draws sizing the prompts took, and the simulator draws the
same ones. Every request becomes a record labelled with its session and its
1-based index in it; the session's last record says how it ended.

Synthetic turns (`Turn.user` None) get distinct pseudo-words in every session sent, sized
to `input_len` tokens as plain text with the server's `/tokenize` (`bench.sizing`), not
counting the special tokens (a BOS) the tokenizer adds to any plain prompt; the chat
template's tokens around the message are not part of the count, and a tokenizer may merge
the text's first token with them differently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing.exceptions import Unresolvable

from servekit.bench.sizing import sized_prompts
from servekit.bench.spec import BenchSpec
from servekit.bench.turns import Turns
from servekit.client.endpoint import Endpoint
from servekit.client.http import TimedStream
from servekit.client.stream import StreamResult, ToolCall
from servekit.errors import UsageError
from servekit.records import RequestRecord
from servekit.workload.sessions import (
    AgentSpec,
    SessionsSpec,
    draw_delay,
    session_plan,
    session_rng,
)

PLAIN_TEXT_NOTE = "each turn's new user text, as plain text"


@dataclass(frozen=True, slots=True)
class SessionScript:
    """One session as a point sends it: every user message's text and output length."""

    system: str | None
    users: tuple[str, ...]
    output_lens: tuple[int, ...]


def tool_validators(tools: Sequence[dict[str, Any]]) -> dict[str, Validator]:
    """A JSON-schema validator per tool name, for its `function.parameters` (Draft 2020-12
    unless the schema names its own `$schema`).

    Raises:
        UsageError: a tool's parameters are not a valid JSON schema.
    """
    out: dict[str, Validator] = {}
    for tool in tools:
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        schema = function.get("parameters")
        schema = schema if isinstance(schema, dict) else {}
        cls = validator_for(schema, default=Draft202012Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
            raise UsageError(
                f"tool {function['name']!r}: parameters is not a valid JSON schema "
                f"(parameters{where}: {exc.message})",
                fix="correct the tool's function.parameters in the tools file",
            ) from None
        out[function["name"]] = cls(schema)
    return out


def invalid_calls(calls: Sequence[ToolCall], validators: dict[str, Validator]) -> int:
    """How many calls name no known tool, or have arguments that are not JSON or fail
    that tool's schema (a schema whose `$ref` points outside it cannot pass)."""
    return sum(1 for call in calls if not _valid_call(call, validators))


def _valid_call(call: ToolCall, validators: dict[str, Validator]) -> bool:
    validator = validators.get(call.name)
    if validator is None:
        return False
    try:
        return bool(validator.is_valid(orjson.loads(call.arguments)))
    except (orjson.JSONDecodeError, Unresolvable):
        return False


def assistant_message(
    result: StreamResult, calls: Sequence[ToolCall], call_id: Callable[[ToolCall], str]
) -> dict[str, Any]:
    """The assistant message sent back: the content that streamed (reasoning is not sent
    back) and the tool calls, each with the server's id or `call_id(call)`."""
    message: dict[str, Any] = {"role": "assistant", "content": result.text}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.id or call_id(call),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
    return message


Keep = Callable[[RequestRecord, "int | None"], None]
"""Keeps one finished request's record, with the output length it had to have (None in an
agent loop, where the model is free to stop)."""
BodyOf = Callable[[list[dict[str, Any]], int], dict[str, Any]]
"""Builds a request body from the messages and the output length (`requests.request_body`)."""
RecordOf = Callable[[str, str, int, TimedStream], RequestRecord]
"""Turns a timed stream into its record: (id, point label, scheduled_ns, stream)."""


@dataclass(frozen=True, slots=True)
class SessionJob:
    """One session of a point: its id, what it sends, and its 0-based position in the
    sweep (which seeds its delays)."""

    id: str
    script: SessionScript
    position: int


class SessionPoints:
    """The sessions of a sweep, sent over one endpoint.

    `prepare()` sizes the synthetic turns once; `next_point()` hands out a point's
    sessions; `run(job, ...)` sends one session. The runner drives them like requests
    (closed or open loop) and measures the point.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        spec: BenchSpec,
        path: str,
        *,
        body_of: BodyOf,
        record_of: RecordOf,
    ) -> None:
        assert spec.sessions is not None
        self.endpoint = endpoint
        self.spec = spec
        self.sessions: SessionsSpec = spec.sessions
        self.agent: AgentSpec | None = spec.sessions.agent
        self.path = path
        self.body_of = body_of
        self.record_of = record_of
        self.validators = tool_validators(self.agent.tools if self.agent else spec.tools)
        self.scripts: list[SessionScript] = []  # by position in the sweep
        self.ids: list[str] = []
        self.handed = 0  # sessions handed to points so far
        self.turns = Turns()  # one request's bookkeeping per loop iteration

    async def prepare(self, rng: random.Random, points: int) -> str:
        """Make the sessions of `points` points, sizing every synthetic turn's text; return
        how lengths were counted."""
        plans = self.sessions.sessions
        if not plans:
            raise UsageError("no sessions to send", fix="pass conversations or --turns N")
        sent = [session_plan(plans, p) for p in range(points * self.sessions.sessions_per_point)]
        wanted = [
            turn.input_len or self.spec.input_len
            for plan in sent
            for turn in plan.turns
            if turn.user is None
        ]
        texts: list[str] = []
        method = "dataset"
        if wanted:
            plain = dataclasses.replace(
                self.spec, api="completions", tools=(), shared_prefix=0, chat_template_kwargs=None
            )
            extra = await self._special_tokens()
            wanted = [n + extra for n in wanted]
            texts, counted = await sized_prompts(self.endpoint, plain, wanted, rng)
            method = f"{counted} ({PLAIN_TEXT_NOTE})"
        made = iter(texts)
        for plan in sent:
            users = tuple(turn.user if turn.user is not None else next(made) for turn in plan.turns)
            lens = tuple(turn.output_len for turn in plan.turns)
            self.scripts.append(SessionScript(plan.system, users, lens))
            self.ids.append(plan.id)
        return method

    async def _special_tokens(self) -> int:
        """Tokens `/tokenize` adds to any plain prompt (a BOS token), which a message in a
        chat history does not get: one word counted with and without them."""
        body = {"model": self.spec.model, "prompt": "hello"}
        timeout_s = self.spec.timeout_s
        with_special = await self.endpoint.tokenize(body, timeout_s=timeout_s)
        if with_special is None:
            return 0
        bare = {**body, "add_special_tokens": False}
        without = await self.endpoint.tokenize(bare, timeout_s=timeout_s)
        return 0 if without is None else max(with_special - without, 0)

    def user_turns(self, index: int) -> int:
        """User turns in the sessions of the sweep's `index`-th point: its request count,
        except that an agent's tool rounds add more."""
        count = self.sessions.sessions_per_point
        first = index * count
        return sum(len(self.scripts[p].users) for p in range(first, first + count))

    def next_point(self) -> list[SessionJob]:
        """The next point's sessions, in order (`prepare` made them)."""
        positions = range(self.handed, self.handed + self.sessions.sessions_per_point)
        self.handed = positions.stop
        return [SessionJob(self.ids[p], self.scripts[p], p) for p in positions]

    def _body(self, messages: list[dict[str, Any]], output_len: int) -> dict[str, Any]:
        body = self.body_of(messages, output_len)
        if self.agent is not None:  # the model must be free to stop: max_tokens is a cap
            body.pop("ignore_eos", None)
            body.pop("min_tokens", None)
            body["tools"] = list(self.agent.tools)
            body["tool_choice"] = "auto"
        return body

    async def run(
        self, job: SessionJob, label: str, due_ns: int, deadline_ns: int | None, keep: Keep
    ) -> None:
        """Send one session's requests in order, the first at `due_ns`; the last record
        says how it ended. No request is started at or after `deadline_ns`."""
        agent = self.agent
        sid, script = job.id, job.script
        rng = session_rng(self.spec.seed, job.position)
        messages: list[dict[str, Any]] = []
        if script.system is not None:
            messages.append({"role": "system", "content": script.system})
        sent = 0
        for k, user in enumerate(script.users):
            messages.append({"role": "user", "content": user})
            wanted = None if agent is not None else script.output_lens[k]
            while True:
                if (wait_s := (due_ns - time.monotonic_ns()) / 1e9) > 0:
                    await asyncio.sleep(wait_s)
                body = self._body(messages, script.output_lens[k])
                timed = await self.endpoint.stream(self.path, body, timeout_s=self.spec.timeout_s)
                await self.turns.turn()  # let other streams stamp their bytes first
                sent += 1
                result = timed.result
                calls = [result.tool_calls[i] for i in sorted(result.tool_calls)]
                record = dataclasses.replace(
                    self.record_of(f"{label}-{sid}-{sent}", label, due_ns, timed),
                    session=sid,
                    turn=sent,
                    tool_calls=len(calls),
                    tool_args_invalid=invalid_calls(calls, self.validators),
                )
                tool_round = agent is not None and bool(calls) and record.ok
                end: str | None = None
                if not record.ok:
                    end = "failed"
                elif not tool_round and k == len(script.users) - 1:
                    end = "completed"
                elif agent is not None and sent >= agent.max_turns:
                    end = "turn_limit"
                else:
                    pause = agent.tool_latency if tool_round and agent else self.sessions.think_time
                    due_ns = time.monotonic_ns() + int(draw_delay(pause, rng) * 1e9)
                    if deadline_ns is not None and due_ns >= deadline_ns:
                        end = "stopped"  # the point's time is up before the next request
                keep(dataclasses.replace(record, session_end=end), wanted)
                if end is not None:
                    return
                if not tool_round:
                    messages.append(assistant_message(result, (), str))
                    break
                assert agent is not None

                def call_id(call: ToolCall, n: int = sent) -> str:
                    return f"call-{sid}-{n}-{call.index}"

                reply = assistant_message(result, calls, call_id)
                messages.append(reply)
                messages += [
                    {"role": "tool", "tool_call_id": c["id"], "content": agent.tool_result}
                    for c in reply["tool_calls"]
                ]
