"""Multi-turn sessions and agent loops (core): what each session sends, and its pacing.

A session is a sequence of user turns. Each turn sends the whole history (previous user
messages and the assistant answers that really came back) plus its new user message, after a
think time. An agent loop is a session whose model may call tools: the client answers each
call after a tool latency and continues until the model answers without a tool call or the
turn limit is reached.

A sweep that needs more sessions than there are plans sends them again in rounds
(`session_plan`): a repeat has its own id and a first message no earlier session began
with, so its first turn is not a prefix-cache hit on the earlier round. Each session's
delays, and a point's session arrivals, are drawn from RNGs of the run's seed and the
session's (or point's) position only (`session_rng`, `arrival_rng`), so bench and the
simulator, or two runs against different servers, draw the same ones.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servekit import jsontext
from servekit.errors import UsageError
from servekit.workload.datasets import LengthSpec
from servekit.workload.textlines import json_object_lines


@dataclass(frozen=True, slots=True)
class Delay:
    """A delay distribution in seconds: `S` (fixed), `S:exponential` (mean S) or
    `S:uniform` (uniform in [S/2, 3S/2])."""

    mean_s: float
    kind: str = "fixed"

    @property
    def spelling(self) -> str:
        """The delay as the flag spells it."""
        return f"{self.mean_s:g}" if self.kind == "fixed" else f"{self.mean_s:g}:{self.kind}"


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn.

    Attributes:
        user: the new user message's text; None for a synthetic turn, whose text is made
            and sized to `input_len` tokens when the run starts.
        input_len: tokens of a synthetic turn's new user message.
        output_len: output tokens asked for (an agent loop: the cap of each response).
    """

    user: str | None
    output_len: int
    input_len: int | None = None


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """One session: an id, an optional system message, its user turns in order."""

    id: str
    turns: tuple[Turn, ...]
    system: str | None = None


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """How the client plays the tools of an agent loop.

    Attributes:
        tools: OpenAI function tools sent with every request; calls are checked against
            their `parameters` JSON schema.
        tool_latency: how long the client takes to answer a call.
        tool_result: the content of every tool result message.
        max_turns: most requests in one session (model responses, tool rounds included).
    """

    tools: tuple[dict[str, Any], ...]
    tool_latency: Delay
    tool_result: str
    max_turns: int


@dataclass(frozen=True, slots=True)
class SessionsSpec:
    """The sessions of a run.

    Attributes:
        sessions: every session to send, in order (a point takes the next ones).
        source: "synthetic", "sharegpt FILE" or "jsonl FILE".
        think_time: the wait before each turn after the first.
        sessions_per_point: sessions each load point runs.
        agent: set for agent loops.
        points: load points of the sweep (to count the repeated sessions).
    """

    sessions: tuple[SessionPlan, ...]
    source: str
    think_time: Delay
    sessions_per_point: int
    agent: AgentSpec | None = None
    points: int = 1

    @property
    def repeated(self) -> int:
        """Sessions the sweep sends beyond the distinct plans (rounds past the first)."""
        return max(self.points * self.sessions_per_point - len(self.sessions), 0)


ROUND_SEPARATOR = "#"
"""Between a plan's id and its round in a repeated session's id (`a#2`); no plan id holds it."""


def session_plan(plans: Sequence[SessionPlan], position: int) -> SessionPlan:
    """The session sent at 0-based `position` of a sweep: plan `position % len(plans)`, as
    is in its first round; in round k >= 2 with the id `{id}#k` and the first user message
    starting with `[round k] `, so no earlier session shares its first turn (a synthetic
    first turn stays None: its text or ids are made per session sent anyway)."""
    plan = plans[position % len(plans)]
    round_ = position // len(plans) + 1
    if round_ == 1:
        return plan
    turns = plan.turns
    if turns and turns[0].user is not None:
        salted = dataclasses.replace(turns[0], user=f"[round {round_}] {turns[0].user}")
        turns = (salted, *turns[1:])
    return SessionPlan(f"{plan.id}{ROUND_SEPARATOR}{round_}", turns, plan.system)


def session_rng(seed: int, position: int) -> random.Random:
    """The RNG of the delays (think times, tool latencies) of the session at 0-based
    `position` of a sweep: of the seed and the position only."""
    return random.Random(f"servekit-session:{seed}:{position}")  # noqa: S311 - reproducible


def arrival_rng(seed: int, first: int) -> random.Random:
    """The RNG of an open-loop point's session arrivals; `first` is the position of its
    first session (a sweep's points take consecutive positions)."""
    return random.Random(f"servekit-session-arrivals:{seed}:{first}")  # noqa: S311


DELAY_KINDS = ("fixed", "exponential", "uniform")


def parse_delay(text: str, flag: str) -> Delay:
    """Parse `S` (fixed), `S:exponential` (mean S) or `S:uniform` ([S/2, 3S/2]) seconds.

    Raises:
        UsageError: anything else, or S negative or not finite, naming the flag.
    """
    head, colon, kind = text.strip().partition(":")
    try:
        mean_s = float(head)
    except ValueError:
        mean_s = math.nan
    if not math.isfinite(mean_s) or mean_s < 0 or (colon and kind not in DELAY_KINDS[1:]):
        raise UsageError(
            f"{flag} {text!r} is not S, S:exponential or S:uniform with S 0 or more seconds",
            fix=f"e.g. {flag} 2 or {flag} 2:exponential",
        )
    return Delay(mean_s, kind or "fixed")


def draw_delay(delay: Delay, rng: random.Random) -> float:
    """One delay in seconds from the distribution (never negative)."""
    if delay.mean_s == 0 or delay.kind == "fixed":
        return delay.mean_s
    if delay.kind == "exponential":
        return rng.expovariate(1.0 / delay.mean_s)
    return rng.uniform(delay.mean_s / 2, delay.mean_s * 3 / 2)


def synthetic_sessions(
    count: int, turns: int, input_len: LengthSpec, output_len: LengthSpec, rng: random.Random
) -> list[SessionPlan]:
    """`count` sessions of `turns` synthetic user turns, lengths drawn per turn (in tokens:
    `input_len` new tokens per user message, `output_len` tokens per answer)."""
    return [
        SessionPlan(
            id=f"s{number}",
            turns=tuple(
                Turn(user=None, output_len=output_len.draw(rng), input_len=input_len.draw(rng))
                for _ in range(turns)
            ),
        )
        for number in range(1, count + 1)
    ]


_USER_ROLES = {"human", "user"}
_ASSISTANT_ROLES = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}


def parse_conversations(
    text: str, where: str, *, max_turns: int | None = None, default_output_len: int
) -> list[SessionPlan]:
    """Parse a ShareGPT JSON file (a list: every conversation, every turn) or a JSONL file of
    conversations into sessions.

    ShareGPT: each human turn is a user turn whose output length is the word count of the
    gpt turn after it (`default_output_len` when none follows); a system turn becomes the
    system message; conversations with no human turn are left out; ids are made distinct
    (a missing one is the index in the list, a repeat gets `~2`, `~3`, ...; "#" becomes
    "_"). JSONL: one conversation per line (split at line feeds only),
    `{"id"?, "system"?, "turns": [{"user": ..., "output_len"?: ...}]}` or
    `{"id"?, "messages": [{"role": ..., "content": ...}]}`; an id (the line number by
    default) another line has, or one holding "#", is an error.

    Args:
        text: the file's text.
        where: the file's name, for errors.
        max_turns: keep at most this many user turns of each conversation.
        default_output_len: output tokens of a turn the file gives no length for.

    Raises:
        UsageError: not JSON, a bad line (naming the line and field), or no conversation.
    """
    stripped = text.lstrip("\ufeff \t\r\n")
    plans = (
        _sharegpt_sessions(stripped, where, default_output_len)
        if stripped.startswith("[")
        else _jsonl_sessions(text, where, default_output_len)
    )
    if max_turns is not None:
        plans = [SessionPlan(p.id, p.turns[:max_turns], p.system) for p in plans]
    if not plans:
        raise UsageError(
            f"{where} holds no conversations with a user turn",
            fix='write lines like {"turns": [{"user": "Hi"}, {"user": "And then?"}]}',
        )
    return plans


def _sharegpt_sessions(text: str, where: str, default_output_len: int) -> list[SessionPlan]:
    try:
        rows: Any = jsontext.loads_standard(text)
    except jsontext.LOAD_FAILURES as exc:
        raise UsageError(
            f"{where}: not JSON ({jsontext.load_problem(exc)})",
            fix="pass the ShareGPT file as downloaded, or a JSONL file of conversations",
        ) from None
    if not isinstance(rows, list):
        raise UsageError(f"{where}: a ShareGPT file is a JSON list", fix=_SHAREGPT_EXAMPLE)
    found: list[tuple[Any, int, tuple[Turn, ...], str | None]] = []
    for index, row in enumerate(rows):
        messages = row.get("conversations") if isinstance(row, dict) else None
        if not isinstance(messages, list):
            continue
        pairs: list[tuple[Any, str]] = [
            (m.get("from"), m["value"])
            for m in messages
            if isinstance(m, dict) and isinstance(m.get("value"), str)
        ]
        system = next((v for role, v in pairs if role == "system" and v), None)
        turns = _turns(pairs, _USER_ROLES, _ASSISTANT_ROLES, default_output_len)
        if turns:
            found.append((row.get("id"), index, turns, system))
    ids = _unique_ids([(name, index) for name, index, _, _ in found])
    return [
        SessionPlan(name, turns, system)
        for name, (_, _, turns, system) in zip(ids, found, strict=True)
    ]


def _unique_ids(rows: Sequence[tuple[Any, int]]) -> list[str]:
    """Distinct session ids for ShareGPT rows of (id, index in the list): a non-empty string
    id is kept (its "#" made "_": the round separator), the first time it appears; a row
    without one is named by its index; a repeat, or an index another row's id already
    holds, gets the first free `~2`, `~3`, ... suffix. The same rows give the same ids."""
    names = [
        name.replace(ROUND_SEPARATOR, "_") if isinstance(name, str) and name else None
        for name, _ in rows
    ]
    reserved = {name for name in names if name is not None}
    taken: set[str] = set()
    out = []
    for name, (_, index) in zip(names, rows, strict=True):
        if name is not None and name not in taken:
            chosen = name
        else:
            base = name if name is not None else str(index)
            chosen, suffix = base, 1
            while chosen in reserved or chosen in taken:
                suffix += 1
                chosen = f"{base}~{suffix}"
        taken.add(chosen)
        out.append(chosen)
    return out


_SHAREGPT_EXAMPLE = '[{"id": "a", "conversations": [{"from": "human", "value": "Hi"}]}]'


def _turns(
    pairs: list[tuple[Any, str]],
    users: set[str],
    assistants: set[str],
    default_output_len: int,
) -> tuple[Turn, ...]:
    """User turns of (role, text) pairs; an answer's word count is its turn's output."""
    turns = []
    for index, (role, value) in enumerate(pairs):
        if role not in users or not value:
            continue
        reply = pairs[index + 1] if index + 1 < len(pairs) else None
        answered = reply is not None and reply[0] in assistants and reply[1].split()
        output = len(reply[1].split()) if answered and reply else default_output_len
        turns.append(Turn(user=value, output_len=output))
    return tuple(turns)


_JSONL_EXAMPLE = '{"id": "a", "turns": [{"user": "Hi", "output_len": 64}, {"user": "More?"}]}'


def _jsonl_sessions(text: str, where: str, default_output_len: int) -> list[SessionPlan]:
    plans = []
    seen: dict[str, tuple[int, bool]] = {}  # id -> its line, and whether the line gave it
    fix = "write one JSON conversation per line, e.g. " + _JSONL_EXAMPLE
    for number, loc, row in json_object_lines(text, where, fix=fix):
        name = _jsonl_id(row, number, loc, seen)
        if "turns" in row:
            system, turns = _system(row, loc), _listed_turns(row["turns"], loc, default_output_len)
        elif "messages" in row:
            system, turns = _message_turns(row["messages"], loc, default_output_len)
        else:
            raise UsageError(
                f"{loc}: needs a 'turns' or a 'messages' list", fix="e.g. " + _JSONL_EXAMPLE
            )
        plans.append(SessionPlan(name, turns, system))
    return plans


def _jsonl_id(row: dict[str, Any], number: int, loc: str, seen: dict[str, tuple[int, bool]]) -> str:
    """A JSONL conversation's id (its line number by default), refused when another line
    has it or it holds the round separator; kept in `seen`."""
    given = "id" in row
    name = row["id"] if given else str(number)
    if not isinstance(name, str) or not name:
        raise UsageError(f"{loc}: id {name!r} must be a non-empty string", fix='e.g. "id": "a"')
    if ROUND_SEPARATOR in name:
        raise UsageError(
            f"{loc}: id {name!r} holds {ROUND_SEPARATOR!r}, which marks a repeated session's "
            "round (a#2)",
            fix="use another character in the id, e.g. '-' or '_'",
        )
    if name in seen:
        line, was_given = seen[name]
        this = f"id {name!r}" if given else f"default id {name!r} (its line number)"
        other = f"line {line}'s" if was_given else f"line {line}'s default id (its line number)"
        raise UsageError(f"{loc}: {this} is {other} too", fix="give every conversation its own id")
    seen[name] = (number, given)
    return name


def _system(row: dict[str, Any], loc: str) -> str | None:
    system = row.get("system")
    if system is not None and (not isinstance(system, str) or not system):
        raise UsageError(
            f"{loc}: system must be a non-empty string", fix='e.g. "system": "Be brief."'
        )
    return system


def _listed_turns(value: object, loc: str, default_output_len: int) -> tuple[Turn, ...]:
    if not isinstance(value, list) or not value:
        raise UsageError(f"{loc}: turns must be a non-empty list", fix="e.g. " + _JSONL_EXAMPLE)
    turns = []
    for index, item in enumerate(value):
        field = f"turns[{index}]"
        if not isinstance(item, dict):
            raise UsageError(f"{loc}: {field} must be an object", fix='e.g. {"user": "Hi"}')
        user = item.get("user")
        if not isinstance(user, str) or not user:
            raise UsageError(
                f"{loc}: {field}.user must be a non-empty string", fix='e.g. {"user": "Hi"}'
            )
        output = item.get("output_len", default_output_len)
        if isinstance(output, bool) or not isinstance(output, int) or output <= 0:
            raise UsageError(
                f"{loc}: {field}.output_len {output!r} must be a positive whole number",
                fix='e.g. "output_len": 128 (tokens)',
            )
        turns.append(Turn(user=user, output_len=output))
    return tuple(turns)


def _message_turns(
    value: object, loc: str, default_output_len: int
) -> tuple[str | None, tuple[Turn, ...]]:
    if not isinstance(value, list) or not value:
        raise UsageError(f"{loc}: messages must be a non-empty list", fix=_MESSAGES_EXAMPLE)
    pairs: list[tuple[Any, str]] = []
    for index, message in enumerate(value):
        field = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in _MESSAGE_ROLES:
            raise UsageError(
                f"{loc}: {field}.role must be system, user or assistant", fix=_MESSAGES_EXAMPLE
            )
        content = message.get("content")
        if not isinstance(content, str):
            raise UsageError(f"{loc}: {field}.content must be a string", fix=_MESSAGES_EXAMPLE)
        pairs.append((message["role"], content))
    system = next((v for role, v in pairs if role == "system" and v), None)
    turns = _turns(pairs, {"user"}, {"assistant"}, default_output_len)
    if not turns:
        raise UsageError(f"{loc}: messages holds no user message", fix=_MESSAGES_EXAMPLE)
    return system, turns


_MESSAGE_ROLES = {"system", "user", "assistant"}
_MESSAGES_EXAMPLE = 'e.g. "messages": [{"role": "user", "content": "Hi"}]'
