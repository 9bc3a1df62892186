"""Real traffic for the offline simulator (core): trace replay, multi-turn sessions, agents.

Each class here is a `servekit.sim.offline.Traffic`: it plans the requests a load point
sends and the requests a finished one releases, with the token ids the engine's prefix cache
works on, so shared prefixes hit as they would on a server.

- A trace (`TracePoint`) sends each request at its (scaled, windowed) time. A request with
  Mooncake `hash_ids` gets, per id, a block of consecutive negative ids that only that hash
  id gets (`block_ids`: equal ids are equal blocks; a partial last block is the start of the
  full one); one without gets ids no other request has, so it never hits. The engine only
  compares ids, so they need not be a vocabulary's (text and fresh ids are non-negative).
- Sessions (`SessionsPoint`) send turn k + 1 when turn k has ended and its think time has
  passed: its prompt is turn k's prompt ids, then turn k's output ids, then the new user
  message's ids. A text message is tokenized with the live simulator's tokenizer and its
  chat tags (`chat.render_chat`); a synthetic one is `input_len` ids of its own between
  the tags. The closed loop keeps `concurrency` sessions going; the open loop starts sessions at an
  arrival rate.
- Agent loops answer each user turn with a tool call, as the live simulator's model does
  with tools and tool_choice auto: its output is the arguments the live simulator writes
  for the tool `chat.choose_tool` picks (`textgen.tool_call_pieces`, at most the turn's
  output length). After the tool latency the tool result message's ids are appended and the
  model answers with the turn's output length; at most `max_turns` responses per session.

The approximation, against a live run through `sim serve`: the history is re-sent as the
tokens that were prompted and generated, whereas a live client re-renders the messages
(the live tokenizer may join the last prompt token and the first answer token differently,
and renders a tool call as its JSON), so a live turn can miss up to one more block.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from servekit.records import MAX_REQUEST_TOKENS
from servekit.sim.chat import Message, ToolSpec, choose_tool, render_chat
from servekit.sim.engine import SimRequest
from servekit.sim.textgen import Answer, iter_answer_token_ids, tool_call_pieces
from servekit.sim.tokenizer import ID_SPACE, stable_seed, token_id, tokenize
from servekit.workload.sessions import (
    SessionPlan,
    SessionsSpec,
    arrival_rng,
    draw_delay,
    session_plan,
    session_rng,
)
from servekit.workload.synthetic import arrival_offsets
from servekit.workload.traces import MOONCAKE_BLOCK_TOKENS, Trace, TraceRequest

NS = 1_000_000_000
_ASSISTANT_TAG = "<|assistant|>\n"


@dataclass(frozen=True, slots=True)
class TracePoint:
    """A trace replay: one point that sends every request of the trace at its time."""

    label: str
    trace: Trace
    temperature: float = 0.0
    rate_rps: float | None = None  # the replay's mean send rate, as bench reports it

    @property
    def concurrency(self) -> int | None:
        """None: a replay is not a closed loop."""
        return None


@dataclass(frozen=True, slots=True)
class SessionsPoint:
    """Sessions (or agent loops) at one load level: `concurrency` sessions at once, or
    sessions starting at `rate_rps` per second; the point runs `spec.sessions_per_point`
    sessions, those at positions `first`, `first + 1`, ... of the sweep
    (`workload.sessions.session_plan`: past the plans' end, repeats with their own ids and
    first messages). `seed` is the run's (`simulate_sweep` sets it): each session's delays
    and the point's arrivals are drawn from it and their positions, as bench draws them."""

    label: str
    spec: SessionsSpec
    first: int = 0
    temperature: float = 0.0
    concurrency: int | None = None
    rate_rps: float | None = None
    arrival: str = "poisson"
    seed: int = 0


class _Fresh:
    """Token ids no other request has: a run of consecutive ids past the vocabularies."""

    def __init__(self) -> None:
        self.runs = 0

    def ids(self, count: int) -> range:
        base = ID_SPACE + self.runs * MAX_REQUEST_TOKENS
        self.runs += 1
        return range(base, base + count)


class TraceTraffic:
    """A `TracePoint`'s requests."""

    refusable = True
    sends_at_arrival = True

    def __init__(self, point: TracePoint) -> None:
        self.point = point
        self.block = point.trace.block_tokens or MOONCAKE_BLOCK_TOKENS
        self._fresh = _Fresh()

    def start(self, start_ns: int, rng: random.Random) -> list[tuple[int, int]]:
        """Every request at its offset."""
        return [
            (start_ns + round(r.offset_s * NS), index)
            for index, r in enumerate(self.point.trace.requests)
        ]

    def request(self, rid: str, key: int) -> SimRequest:
        """The request with its prompt's token ids."""
        r = self.point.trace.requests[key]
        return SimRequest(
            rid, r.input_len, r.output_len, self.point.temperature, token_ids=self._ids(r)
        )

    def _ids(self, r: TraceRequest) -> list[int] | range:
        if not r.hash_ids:
            return self._fresh.ids(r.input_len)
        ids: list[int] = []
        size = self.block
        for hash_id in r.hash_ids:
            if len(ids) >= r.input_len:
                break
            ids.extend(block_ids(hash_id, size)[: r.input_len - len(ids)])
        if len(ids) < r.input_len:  # fewer ids than blocks: the rest is the request's own
            ids.extend(self._fresh.ids(r.input_len - len(ids)))
        return ids

    def finished(
        self, key: int, request: SimRequest, now_ns: int, error: str | None
    ) -> tuple[dict[str, Any], list[tuple[int, int]]]:
        """The record's fields; a replay releases nothing."""
        fields: dict[str, Any] = {
            "prompt_tokens": request.prompt_tokens,
            "cached_tokens": request.hit_tokens or 0,
            "finish_reason": None if error else "length",
        }
        if error:
            fields.update(error_kind="http_400", error=error)
        return fields, []


def block_ids(hash_id: int, block_tokens: int) -> range:
    """The token ids of the full block a trace hash id names: `block_tokens` consecutive
    negative ids, a range no other hash id's block overlaps (any int, negative ones too,
    maps to its own range); a partial block is a prefix of it."""
    index = 2 * hash_id if hash_id >= 0 else -2 * hash_id - 1  # ints onto 0, 1, 2, ...
    top = -1 - index * block_tokens
    return range(top, top - block_tokens, -1)


@dataclass(slots=True)
class _Session:
    """One session's progress."""

    id: str
    plan: SessionPlan
    rng: random.Random  # its delays
    history: list[int] = field(default_factory=list)  # prompt and output ids so far
    prompt: list[int] = field(default_factory=list)  # the request in flight's prompt
    output: list[int] = field(default_factory=list)  # and its output ids
    user_turn: int = 0  # index of the user turn being answered
    responses: int = 0
    tool_call: bool = False  # the request in flight answers with a tool call
    tool_pending: bool = False  # the last response was a tool call


class SessionsTraffic:
    """A `SessionsPoint`'s sessions."""

    refusable = True
    sends_at_arrival = True

    def __init__(self, point: SessionsPoint) -> None:
        self.point = point
        spec = point.spec
        positions = range(point.first, point.first + spec.sessions_per_point)
        self.plans = [session_plan(spec.sessions, p) for p in positions]
        self.sessions: dict[int, _Session] = {}
        self.next_session = 0
        self._fresh = _Fresh()
        agent = spec.agent
        self.tools = tuple(_tool_spec(t) for t in agent.tools) if agent else ()
        self.tool_ids = (
            tokenize(f"\n<|tool|>\n{agent.tool_result}\n{_ASSISTANT_TAG}") if agent else []
        )

    def start(self, start_ns: int, rng: random.Random) -> list[tuple[int, int]]:
        """The first sessions: `concurrency` at once, or at the arrival times (of the
        seed and `first`, not `rng`, as bench draws them)."""
        point, count = self.point, len(self.plans)
        if point.concurrency is not None:
            self.next_session = min(point.concurrency, count)
            return [(start_ns, j) for j in range(self.next_session)]
        assert point.rate_rps is not None
        self.next_session = count
        arrivals = arrival_rng(point.seed, point.first)
        offsets = arrival_offsets(point.arrival, point.rate_rps, count, arrivals)
        return [(start_ns + int(offset * NS), j) for j, offset in enumerate(offsets)]

    def request(self, rid: str, key: int) -> SimRequest:
        """The session's next request: its history and the new message."""
        s = self.sessions.get(key)
        if s is None:
            plan, rng = self.plans[key], session_rng(self.point.seed, self.point.first + key)
            s = self.sessions[key] = _Session(plan.id, plan, rng)
        turn = s.plan.turns[s.user_turn]
        limit = turn.output_len
        s.tool_call = False
        segment = self.tool_ids if s.tool_pending else self._user_ids(s)
        s.prompt = s.history + segment
        seed = stable_seed("sim-run", s.id, str(s.responses + 1))
        if self.tools and not s.tool_pending:
            tool = choose_tool(self.tools, "auto", [Message("user", turn.user or "")])
            assert tool is not None
            pieces = tool_call_pieces(tool, seed)
            if len(pieces) <= limit:  # a call cut short by the length limit is no call
                s.tool_call = True
                limit = len(pieces)
            s.output = [token_id(piece) for piece in pieces[:limit]]
        else:
            answer = Answer(0, limit, None, (), "length", 0, seed)
            s.output = list(iter_answer_token_ids(answer))
        return SimRequest(
            rid,
            len(s.prompt),
            limit,
            self.point.temperature,
            token_ids=s.prompt,
            output_ids=iter(s.output),
        )

    def _user_ids(self, s: _Session) -> list[int]:
        """A user message's ids as the live server renders them: the first turn with the
        tools header and system message, each message in its role tags; a synthetic
        message's text is `input_len` ids of its own between the tags (bench sizes its
        synthetic text without them)."""
        turn = s.plan.turns[s.user_turn]
        lead = "\n" if s.history else ""
        if not s.history:
            messages = [Message("system", s.plan.system)] if s.plan.system else []
            if turn.user is not None:
                return tokenize(render_chat([*messages, Message("user", turn.user)], self.tools))
            lead = render_chat(messages, self.tools).removesuffix(_ASSISTANT_TAG)
        if turn.user is not None:
            return tokenize(f"{lead}<|user|>\n{turn.user}\n{_ASSISTANT_TAG}")
        fresh = list(self._fresh.ids(turn.input_len or 1))
        return tokenize(f"{lead}<|user|>") + fresh + tokenize(f"\n{_ASSISTANT_TAG}")

    def finished(
        self, key: int, request: SimRequest, now_ns: int, error: str | None
    ) -> tuple[dict[str, Any], list[tuple[int, int]]]:
        """The record's fields, and the session's next request (or the next session's)."""
        s = self.sessions[key]
        s.responses += 1
        fields: dict[str, Any] = {
            "prompt_tokens": request.prompt_tokens,
            "cached_tokens": request.hit_tokens or 0,
            "session": s.id,
            "turn": s.responses,
        }
        end: str | None = None
        delay = None
        agent = self.point.spec.agent
        if error:
            fields.update(error_kind="http_400", error=error)
            end = "failed"
        else:
            s.history = s.prompt + s.output
            if s.tool_call:
                fields.update(finish_reason="tool_calls", tool_calls=1)
                s.tool_pending = True
                delay = agent.tool_latency if agent else None
            else:
                fields["finish_reason"] = "length"
                s.tool_pending = False
                s.user_turn += 1
                delay = self.point.spec.think_time
                if s.user_turn == len(s.plan.turns):
                    end = "completed"
            if end is None and agent is not None and s.responses >= agent.max_turns:
                end = "turn_limit"
        released: list[tuple[int, int]] = []
        if end is not None:
            fields["session_end"] = end
            del self.sessions[key]
            if self.next_session < len(self.plans):  # a closed loop starts the next session
                released.append((now_ns, self.next_session))
                self.next_session += 1
        else:
            assert delay is not None
            released.append((now_ns + round(draw_delay(delay, s.rng) * NS), key))
        return fields, released


def _tool_spec(tool: dict[str, Any]) -> ToolSpec:
    """An OpenAI function tool as the simulated model sees it."""
    function = tool.get("function", tool)
    return ToolSpec(
        str(function["name"]), function.get("parameters") or {}, function.get("description", "")
    )
