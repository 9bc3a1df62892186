"""`servekit bench` session and agent-loop options as a SessionsSpec (shell)."""

from __future__ import annotations

import random
from typing import Any

from servekit.bench.sessions import tool_validators
from servekit.cli._load_options import LoadOptions
from servekit.cli._values import parse_numbers, read_text_option
from servekit.errors import UsageError
from servekit.workload.datasets import parse_length
from servekit.workload.sessions import (
    AgentSpec,
    SessionsSpec,
    parse_conversations,
    parse_delay,
    synthetic_sessions,
)

DEFAULT_SESSIONS_PER_POINT = 16


def sessions_input(options: LoadOptions, tools: tuple[dict[str, Any], ...]) -> SessionsSpec | None:
    """The sessions to send, or None without --conversations, --turns or --agent.

    --conversations reads every conversation of the file (--turns caps their turns);
    --turns alone makes synthetic sessions of that many turns (--input-len new tokens per
    turn, --output-len per answer); --agent alone makes synthetic one-turn agent sessions.
    Synthetic sessions number --sessions for each point of --concurrency and --rate. Every
    tool's parameters are checked as a JSON schema first (sessions or not), before a run
    directory exists.

    Raises:
        UsageError: a tool whose parameters are not a JSON schema, options sessions cannot
            honour, --agent without tools, a bad file or delay.
    """
    tool_validators(tools)  # one line naming the tool and the schema's problem
    conversations, turns, agent = options.conversations, options.turns, options.agent
    if conversations is None and turns is None and not agent:
        if options.sessions_per_point is not None:
            raise UsageError(
                "--sessions counts sessions; it needs --conversations, --turns or --agent",
                fix="add --turns N (synthetic sessions) or --conversations FILE",
            )
        return None
    _refuse_with_sessions(options)
    if agent and not tools:
        raise UsageError(
            "--agent needs tools the model may call",
            fix="pass --tools FILE with at least one tool (e.g. examples/agent/tools.json)",
        )
    per_point = options.sessions_per_point or DEFAULT_SESSIONS_PER_POINT
    # str(): sim run's lengths are plain integers, bench's may be distributions
    input_len = parse_length(str(options.input_len or 1024), "--input-len")
    output_len = parse_length(str(options.output_len or 128), "--output-len")
    rng = random.Random(options.seed)  # noqa: S311 - reproducible lengths
    points = len(parse_numbers(options.concurrency, int, "--concurrency")) + len(
        parse_numbers(options.rate, float, "--rate", allow_inf=True)
    )
    if conversations is not None:
        text = read_text_option(conversations, "--conversations")
        plans = parse_conversations(
            text, str(conversations), max_turns=turns, default_output_len=output_len.mean
        )
        kind = "sharegpt" if text.lstrip("\ufeff \t\r\n").startswith("[") else "jsonl"
        source = f"{kind} {conversations}"
    else:
        count = per_point * max(1, points)
        plans = synthetic_sessions(count, turns or 1, input_len, output_len, rng)
        source = "synthetic"
    return SessionsSpec(
        sessions=tuple(plans),
        source=source,
        think_time=parse_delay(options.think_time or "0", "--think-time"),
        sessions_per_point=per_point,
        agent=AgentSpec(
            tools=tools,
            tool_latency=parse_delay(options.tool_latency or "0", "--tool-latency"),
            tool_result=options.tool_result or "",
            max_turns=options.agent_turns or 8,
        )
        if agent
        else None,
        points=max(1, points),
    )


def _refuse_with_sessions(options: LoadOptions) -> None:
    """One line for each option sessions cannot honour."""
    if options.trace is not None:
        raise UsageError(
            "--trace replays single requests; it cannot take --conversations, --turns or --agent",
            fix="drop --trace, or drop the session options",
        )
    if options.dataset is not None:
        raise UsageError(
            "sessions take their prompts from --conversations (or make them); they cannot "
            "take --dataset",
            fix="pass the file as --conversations FILE instead",
        )
    if options.api == "completions":
        raise UsageError(
            "sessions send chat histories; they cannot run with --api completions",
            fix="use --api chat (the default)",
        )
    if (options.workers or 1) > 1:
        raise UsageError(
            "sessions with --workers > 1 are not supported yet", fix="run them with --workers 1"
        )
