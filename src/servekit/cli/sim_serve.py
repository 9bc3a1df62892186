"""`servekit sim serve` (shell): run the simulator as a live OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from servekit.cli._output import json_option, profiles_dir_option, set_option
from servekit.cli._values import FiniteFloat
from servekit.errors import UsageError
from servekit.sim.faults import ACCEPTED_FORMS

F = TypeVar("F", bound=Callable[..., Any])


def _stderr(line: str) -> None:
    click.echo(line, err=True)


def _json_ready(line: str) -> None:
    """Turn the ready line into one JSON object on stdout (the URL with the bound port)."""
    from servekit import jsontext
    from servekit.results.sim_serve import SIM_SERVE_VERSION, ListeningEvent

    profile, _, url = line.removeprefix("servekit sim: serving ").partition(" on ")
    event = ListeningEvent(
        schema_version=SIM_SERVE_VERSION, event="listening", profile=profile, url=url
    )
    click.echo(jsontext.dumps(event.as_json(), what="the listening event"))


def _share_option(name: str, help_text: str) -> Callable[[F], F]:
    """A share of generated tokens, 0 to 1 (default 0)."""
    return click.option(
        name, type=FiniteFloat(min=0, max=1), default=0.0, show_default=True, help=help_text
    )


@click.command("serve")
@click.option("--profile", "profile_name", required=True, help="Profile to simulate.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="TCP port; 0 picks a free one.",
)
@click.option(
    "--time-scale",
    type=FiniteFloat(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Wall seconds per simulated second (0.1 runs ten times faster).",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seeds acceptance, sampling, faults."
)
@click.option(
    "--fault",
    "fault_values",
    multiple=True,
    metavar="FAULT",
    help=f"Inject a fault (repeatable): {', '.join(ACCEPTED_FORMS)}.",
)
@click.option(
    "--enable-prompt-tokens-details",
    is_flag=True,
    help="As vLLM's flag: usage reports prompt_tokens_details.cached_tokens (prefix-cache hits).",
)
@_share_option(
    "--empty-token-share",
    "Share of generated tokens that decode to no text (as special tokens do).",
)
@_share_option(
    "--split-char-share",
    "Share of generated tokens that begin a character spelled by two tokens (as a "
    "byte-level vocabulary splits CJK and emoji): they stream as empty text.",
)
@set_option
@profiles_dir_option
@json_option
def serve_command(
    profile_name: str,
    host: str,
    port: int,
    time_scale: float,
    seed: int,
    fault_values: tuple[str, ...],
    enable_prompt_tokens_details: bool,
    empty_token_share: float,
    split_char_share: float,
    overrides: tuple[str, ...],
    profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Serve a simulated vLLM deployment on HTTP until Ctrl-C or SIGTERM.

    Answers with max_tokens have exactly that many tokens (as with ignore_eos); a complete
    tool call ends early; without max_tokens an answer is 256 tokens and ends with "stop".
    """
    from servekit.profiles import load_profile
    from servekit.sim.faults import parse_faults
    from servekit.sim.server import serve
    from servekit.sim.textgen import TokenText

    faults = parse_faults(fault_values, name="--fault")
    if empty_token_share + split_char_share > 1:
        raise UsageError(
            f"--empty-token-share {empty_token_share:g} + --split-char-share "
            f"{split_char_share:g} is over 1",
            fix="keep the two shares' sum at most 1",
        )
    text = TokenText(empty_share=empty_token_share, split_share=split_char_share)
    profile = load_profile(profile_name, extra_dirs=profiles_dirs, overrides=overrides)
    serve(
        profile,
        host,
        port,
        seed=seed,
        time_scale=time_scale,
        faults=faults,
        announce=_json_ready if as_json else _stderr,
        log=_stderr,
        enable_prompt_tokens_details=enable_prompt_tokens_details,
        token_text=text,
    )
