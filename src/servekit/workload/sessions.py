"""Multi-turn sessions and agent loops (core): what each session sends, and its pacing.

A session is a sequence of user turns. Each turn sends the whole history (previous user
messages and the assistant answers that really came back) plus its new user message, after a
think time. An agent loop is a session whose model may call tools: the client answers each
call after a tool latency and continues until the model answers without a tool call or the
turn limit is reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    """

    sessions: tuple[SessionPlan, ...]
    source: str
    think_time: Delay
    sessions_per_point: int
    agent: AgentSpec | None = None
