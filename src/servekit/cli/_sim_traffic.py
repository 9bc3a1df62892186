"""`servekit sim run`'s traffic options (shell): bench's, with the same names and meanings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from servekit.cli._values import FiniteFloat
from servekit.workload.traces import TRACE_FORMATS

F = TypeVar("F", bound=Callable[..., Any])
_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_DELAY = "S, S:exponential or S:uniform"

_OPTIONS = [
    click.option("--tools", type=_FILE, help="A JSON list of OpenAI tools (for --agent)."),
    click.option(
        "--conversations",
        type=_FILE,
        help="Multi-turn sessions from a ShareGPT JSON (every turn) or a JSONL file of "
        "conversations; --concurrency is then concurrent sessions, --rate sessions/s.",
    ),
    click.option(
        "--turns",
        type=click.IntRange(min=1),
        help="Synthetic sessions of N user turns (--input-len new tokens per turn), or the "
        "most turns taken from each --conversations session.",
    ),
    click.option(
        "--sessions",
        "sessions_per_point",
        type=click.IntRange(min=1),
        help="Sessions per point (sessions and agent loops) [16].",
    ),
    click.option(
        "--think-time",
        default="0",
        show_default=True,
        help=f"Seconds before later turns: {_DELAY}.",
    ),
    click.option(
        "--agent",
        is_flag=True,
        help="Agent loops: the model calls a tool (--tools) on each user turn and answers "
        "after the tool's result, up to --agent-turns responses.",
    ),
    click.option(
        "--agent-turns",
        type=click.IntRange(min=1),
        default=8,
        show_default=True,
        help="Most model responses in one agent session.",
    ),
    click.option(
        "--tool-latency",
        default="0.1",
        show_default=True,
        help=f"Seconds the client takes to answer a tool call: {_DELAY}.",
    ),
    click.option(
        "--tool-result",
        default='{"ok": true}',
        show_default=True,
        help="The content of every tool result message.",
    ),
    click.option(
        "--trace", type=_FILE, help="Replay a timestamped trace: sends at its times, its lengths."
    ),
    click.option(
        "--trace-format",
        type=click.Choice(list(TRACE_FORMATS)),
        default="mooncake",
        show_default=True,
    ),
    click.option(
        "--time-scale",
        type=FiniteFloat(min=1e-6),
        default=1.0,
        show_default=True,
        help="Multiply the trace's times (0.5 replays it twice as fast).",
    ),
    click.option(
        "--trace-start",
        type=FiniteFloat(min=0),
        default=0.0,
        show_default=True,
        help="Seconds into the trace where the replay starts.",
    ),
    click.option(
        "--trace-duration",
        type=FiniteFloat(min=1e-3),
        help="Seconds of the trace to replay [all].",
    ),
    click.option("--max-requests", type=click.IntRange(min=1), help="Most trace requests to send."),
    click.option(
        "--trace-block-tokens",
        type=click.IntRange(min=1),
        default=512,
        show_default=True,
        help="Prompt tokens per Mooncake hash id.",
    ),
]


def traffic_options(command: F) -> F:
    """Add the trace, session and agent-loop options to a command (in this order)."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command
