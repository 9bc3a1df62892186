"""Console output and error handling shared by the CLI commands (shell).

Machine output (--json) goes to stdout alone; human output through rich on stdout;
diagnostics on stderr. ServekitError becomes one line on stderr and its exit code.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import click
from rich.console import Console

from servekit.errors import ServekitError, UsageError

P = ParamSpec("P")
R = TypeVar("R")


def stdout_console() -> Console:
    """A rich console on stdout (plain text when stdout is not a terminal)."""
    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


def emit_json(document: object) -> None:
    """Write one JSON document to stdout."""
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def handles_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a ServekitError into `servekit: error: ...` on stderr and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except ServekitError as exc:
            click.echo(f"servekit: error: {exc}", err=True)
            raise SystemExit(exc.exit_code) from None

    return wrapper


profiles_dir_option: Callable[[Callable[..., Any]], Callable[..., Any]] = click.option(
    "--profiles-dir",
    "profiles_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Directory of user profiles, searched before the built-ins (repeatable; "
    "also $SERVEKIT_PROFILE_PATH).",
)
json_option: Callable[[Callable[..., Any]], Callable[..., Any]] = click.option(
    "--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout only."
)
set_option: Callable[[Callable[..., Any]], Callable[..., Any]] = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a profile value; a bare key means serve_args.KEY "
    "(e.g. --set max_model_len=65536 --set env.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1).",
)


def parse_numbers(text: str | None, kind: type[int] | type[float], flag: str) -> list[float]:
    """Parse a comma-separated list of positive finite numbers given to `flag`."""
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a comma-separated list of numbers") from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise UsageError(f"{flag} {text!r} needs positive numbers, e.g. {flag} 1,4,16")
    return values
