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


class FiniteFloat(click.FloatRange):
    """A float option that refuses NaN and infinity (exit 2), optionally within a range.

    Every float option of every command uses it: `float("nan")` passes click's range checks
    (every comparison with NaN is false) and would reach summary.json as a bare `NaN`.
    """

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


def parse_numbers(
    text: str | None, kind: type[int] | type[float], flag: str, *, allow_inf: bool = False
) -> list[float]:
    """Parse a comma-separated list of positive finite numbers given to `flag`.

    With `allow_inf`, `inf` is accepted too (`--rate inf`: send every request at once).
    """
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(
            f"{flag} {text!r} is not a comma-separated list of numbers",
            fix=f"e.g. {flag} 1,4,16",
        ) from None
    infinite_ok = allow_inf and kind is float
    if not values or any(
        math.isnan(v) or v <= 0 or (math.isinf(v) and not infinite_ok) for v in values
    ):
        raise UsageError(
            f"{flag} {text!r} needs positive finite numbers"
            + (" (or inf: all at once)" if infinite_ok else ""),
            fix=f"e.g. {flag} 1,4,16" + (",inf" if infinite_ok else ""),
        )
    return values


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
