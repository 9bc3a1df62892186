"""`servekit bench`'s options for how output tokens are pinned and counted (shell)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def token_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--min-tokens` and `--token-ids`: how the output length is pinned and counted."""
    command = click.option(
        "--token-ids", type=click.Choice(["auto", "on", "off"]), default="auto",
        show_default=True,
        help="Ask for each chunk's token ids (vLLM's return_token_ids): auto asks when one "
        "probe request shows the server returns them; off counts from usage.",
    )(command)  # fmt: skip
    return click.option(
        "--min-tokens", is_flag=True,
        help="Also pin the output length with min_tokens (servers without ignore_eos).",
    )(command)  # fmt: skip
