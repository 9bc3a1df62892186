"""Console output, shared options and number lists for the CLI commands (shell).

Machine output (--json) goes to stdout alone; human output through rich on stdout;
diagnostics on stderr. A ServekitError becomes one line on stderr in `cli/main.py`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servekit import jsontext
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
    click.echo(jsontext.dumps(document, indent=2, what="the --json output"))


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


def make_out_dir(path: Path, flag: str = "--out") -> Path:
    """Create an output directory given to `flag` (and its parents), or say why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create {flag} {str(path)!r}: {exc.strerror or exc}",
            fix=f"give {flag} a writable directory",
        ) from None
    return path


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
