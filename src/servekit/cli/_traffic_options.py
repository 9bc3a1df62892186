"""Traffic options of bench and sim run as click decorators (shell): sessions, agent loops,
trace replay."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from servekit.cli._values import FiniteFloat
from servekit.workload.traces import MOONCAKE_BLOCK_TOKENS, TRACE_FORMATS

Command = TypeVar("Command", bound=Callable[..., Any])

# fmt: off
_SESSION_OPTIONS = (
    click.option("--conversations", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="Multi-turn sessions from a ShareGPT JSON (every turn) or a JSONL file of "
                      "conversations; --concurrency is then concurrent sessions, --rate "
                      "sessions/s."),
    click.option("--turns", type=click.IntRange(min=1),
                 help="Synthetic sessions of N user turns (--input-len new tokens per turn), or "
                      "the most turns taken from each --conversations session."),
    click.option("--sessions", "sessions_per_point", type=click.IntRange(min=1),
                 help="Sessions per point (sessions and agent loops) [16]."),
    click.option("--think-time", default="0", show_default=True,
                 help="Seconds before each later turn: S, S:exponential or S:uniform."),
    click.option("--agent", is_flag=True,
                 help="Agent loops: answer the model's tool calls (--tools) and continue until it "
                      "answers without one or --agent-turns is reached."),
    click.option("--agent-turns", type=click.IntRange(min=1), default=8, show_default=True,
                 help="Most model responses in one agent session."),
    click.option("--tool-latency", default="0.1", show_default=True,
                 help="Seconds the client takes to answer a tool call: S, S:exponential or "
                      "S:uniform."),
    click.option("--tool-result", default='{"ok": true}', show_default=True,
                 help="The content of every tool result message."),
)
# fmt: on


def session_options(command: Command) -> Command:
    """The session and agent-loop options (bench's; sim run takes the same)."""
    for option in reversed(_SESSION_OPTIONS):
        command = option(command)
    return command


# fmt: off
_TRACE_OPTIONS = (
    click.option("--trace", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="Replay a timestamped trace: requests sent at its times, lengths as given."),
    click.option("--trace-format", type=click.Choice(TRACE_FORMATS), default="mooncake",
                 show_default=True, help="The trace file's format (docs/workloads.md)."),
    click.option("--time-scale", type=FiniteFloat(min=1e-6), default=1.0, show_default=True,
                 help="Multiply the trace's times (0.5 replays it twice as fast)."),
    click.option("--trace-start", type=FiniteFloat(min=0), default=0.0, show_default=True,
                 help="Seconds into the trace where the replay starts."),
    click.option("--trace-duration", type=FiniteFloat(min=1e-3),
                 help="Seconds of the trace to replay [all]."),
    click.option("--max-requests", type=click.IntRange(min=1), help="Most trace requests to send."),
    click.option("--trace-block-tokens", type=click.IntRange(min=1), default=MOONCAKE_BLOCK_TOKENS,
                 show_default=True, help="Prompt tokens per Mooncake hash id."),
)
_LAG_OPTION = click.option(
    "--max-schedule-lag-ms", type=FiniteFloat(min=0), default=10.0, show_default=True,
    help="A replay is invalid when its sends' p99 lag behind the trace's times exceeds this.")
# fmt: on


def trace_options(command: Command) -> Command:
    """The trace replay options (bench's; sim run takes the same)."""
    for option in reversed(_TRACE_OPTIONS):
        command = option(command)
    return command


def traffic_options(command: Command) -> Command:
    """bench's session, agent-loop and trace options, and the replay's lag bound."""
    return session_options(trace_options(_LAG_OPTION(command)))
