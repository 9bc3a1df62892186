"""Console output, shared options and number lists for the CLI commands (shell).

Machine output (--json) goes to stdout alone; human output through rich on stdout;
diagnostics on stderr. A ServekitError becomes one line on stderr in `cli/main.py`.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from servekit.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from servekit.redaction import Redactor


def stdout_console() -> Console:
    """A rich console on stdout (plain text when stdout is not a terminal)."""
    from rich.console import Console  # here: rich costs a cheap command's start-up

    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def redacted_errors(redactor: Redactor) -> Iterator[None]:
    """Errors leaving the block lose the run's secrets (a server's echoed text or a quoted
    request in the message), before `cli/main.py` prints them."""
    try:
        yield
    except Exception as exc:
        redactor.scrub(exc)
        raise


def emit_json(document: object) -> None:
    """Write one JSON document to stdout."""
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


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
        raise UsageError(
            f"{flag} {text!r} is not a comma-separated list of numbers",
            fix=f"e.g. {flag} 1,4,16",
        ) from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise UsageError(f"{flag} {text!r} needs positive numbers", fix=f"e.g. {flag} 1,4,16")
    return values


def check_load_options(concurrency: str | None, rate: str | None, arrival: str) -> None:
    """bench's and sim run's load: exactly one of --concurrency and --rate, and an arrival
    process spelled as `workload.synthetic` takes it."""
    from servekit.workload.synthetic import check_arrival

    if (concurrency is None) == (rate is None):
        raise UsageError(
            "give exactly one of --concurrency or --rate",
            fix="e.g. --concurrency 1,4,16 (closed loop) or --rate 0.5,1,2 (open loop)",
        )
    check_arrival(arrival, name="--arrival")


def parse_json_object(text: str, flag: str) -> dict[str, Any]:
    """Parse the JSON object given to `flag` (e.g. --chat-template-kwargs)."""
    example = '\'{"thinking_mode": "enabled"}\''
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{flag} is not JSON ({exc.msg})", fix=f"quote it for the shell, e.g. {example}"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object", fix=f"e.g. {example}")
    return value
