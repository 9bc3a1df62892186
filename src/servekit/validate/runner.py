"""Run the validate checks in order (shell): selection, a timeout per check, results.

Checks run one after another because later ones use what earlier ones learnt (the served
name, max_model_len, the greedy references). A check that does not finish within
`check_timeout_s` fails as a hung server; a check that raises is reported as a failed check
naming servekit's own error, so one bug never hides the other checks' results.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit import jsontext
from servekit.bench.scrape import scrape
from servekit.bench.signals import sigterm_as_interrupt
from servekit.client.endpoint import open_endpoint
from servekit.client.transport import Transport
from servekit.errors import Interrupted, Terminated, UsageError
from servekit.redaction import Redactor
from servekit.results.validate import (
    VALIDATE_VERSION,
    CheckBlock,
    ValidateDocument,
    ValidateTarget,
)
from servekit.validate import checks_basic as basic
from servekit.validate import checks_load as load
from servekit.validate.context import Context, Outcome, ValidateSpec
from servekit.validate.transcript import Transcript

CheckFn = Callable[[Context], Awaitable[Outcome]]

# (group, name, function): the order they run in.
CHECKS: tuple[tuple[str, str, CheckFn], ...] = (
    ("identity", "health", basic.check_health),
    ("identity", "models", basic.check_models),
    ("identity", "max_model_len", basic.check_max_model_len),
    ("chat", "chat", basic.check_chat),
    ("reasoning", "reasoning", basic.check_reasoning),
    ("tools", "tool_calls", basic.check_tools),
    ("long-context", "long_context", load.check_long_context),
    ("long-context", "context_overflow", load.check_context_overflow),
    ("ladder", "ladder", load.check_ladder),
    ("spec-decode", "spec_decode", load.check_spec_decode),
)
NAMES = tuple(dict.fromkeys([g for g, _, _ in CHECKS] + [n for _, n, _ in CHECKS]))


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's result as it appears in validate.json."""

    name: str
    status: str
    detail: str
    duration_s: float
    data: dict[str, Any] = field(default_factory=dict)

    def to_block(self) -> CheckBlock:
        """One check as validate.json holds it (plus `data` when there is any)."""
        values: dict[str, object] = {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "duration_s": round(self.duration_s, 3),
        }
        if self.data:
            values["data"] = self.data
        return CheckBlock.model_validate(values)  # fmt: skip


def check_names(values: tuple[str, ...], flag: str) -> frozenset[str]:
    """Parse --only/--skip values (repeatable, comma-separated groups or check names).

    Raises:
        UsageError: an unknown name, listing the known ones.
    """
    names = {v.strip() for value in values for v in value.split(",") if v.strip()}
    if unknown := sorted(names - set(NAMES)):
        raise UsageError(
            f"{flag} {', '.join(unknown)}: unknown check", fix=f"use {', '.join(NAMES)}"
        )
    return frozenset(names)


def _selected(spec: ValidateSpec, group: str, name: str) -> bool:
    if spec.only and not ({group, name} & spec.only):
        return False
    return not ({group, name} & spec.skip)


async def run_checks(
    spec: ValidateSpec,
    *,
    out: Path | None = None,
    on_result: Callable[[CheckResult], None] = lambda _: None,
    transport: Transport | None = None,
) -> list[CheckResult]:
    """Run every selected check; `on_result` sees each result as it is decided.

    Requests go over `transport` when given (a test's fake server), else over servekit's
    own HTTP session. The spec's secrets are removed from every result and transcript line
    (a server or an engine log can echo the API key).
    """
    results: list[CheckResult] = []
    with Transcript(out, spec.redactor) as transcript:
        async with open_endpoint(spec.base_url, spec.headers, transport=transport) as server:
            ctx = Context(spec, server, transcript)
            ctx.metrics_before = await scrape(server)
            ctx.check = "discover"
            await basic.learn_model(ctx)  # every check needs the served name, even alone
            server_down = False
            for group, name, check in CHECKS:
                if not _selected(spec, group, name):
                    result = CheckResult(name, "skip", "not selected (--only/--skip)", 0.0)
                elif server_down:
                    result = CheckResult(name, "skip", "skipped: the server does not answer", 0.0)
                else:
                    result = await _run_one(ctx, name, check)
                    server_down = name == "health" and result.status == "fail"
                result = _redacted(result, spec.redactor)
                results.append(result)
                on_result(result)
    return results


async def _run_one(ctx: Context, name: str, check: CheckFn) -> CheckResult:
    ctx.check = name
    start = time.monotonic()
    limit = ctx.spec.check_timeout_s * (4 if name in {"ladder", "long_context"} else 1)
    try:
        async with asyncio.timeout(limit):
            outcome = await check(ctx)
    except TimeoutError:
        outcome = Outcome("fail", f"no result within {limit:g} s: the server hung")
    except Exception as exc:  # servekit's own bug: report it, keep the other checks
        outcome = Outcome("fail", f"servekit internal error ({type(exc).__name__}: {exc}); "
                          "please report it")  # fmt: skip
    return CheckResult(name, outcome.status, outcome.detail, time.monotonic() - start, outcome.data)


MAX_DETAIL_CHARS = 1000
"""A check's detail is one line of at most this many printable characters: it quotes model
and server text, which may hold terminal escapes or run on without end."""


def _printable(text: str) -> str:
    flat = "".join(c if c.isprintable() else " " for c in text)
    return flat if len(flat) <= MAX_DETAIL_CHARS else flat[: MAX_DETAIL_CHARS - 3] + "..."


def _redacted(result: CheckResult, redactor: Redactor) -> CheckResult:
    """The result with the run's secrets removed and its detail made one printable line."""
    detail, data = _printable(redactor.redact(result.detail)), redactor.redact_json(result.data)
    if detail == result.detail and data is result.data:
        return result
    return dataclasses.replace(result, detail=detail, data=data)


def validate_document(
    results: list[CheckResult], spec: ValidateSpec, *, url: str | None = None
) -> ValidateDocument:
    """validate.json: passed when no check failed (docs/schemas/README.md); `url` replaces the
    spec's base URL in it (to write it without credentials)."""
    return ValidateDocument(
        schema_version=VALIDATE_VERSION,
        passed=all(r.status != "fail" for r in results),
        target=ValidateTarget(url=url or spec.base_url, model=spec.model),
        checks=[r.to_block() for r in results],
    )


def run_validate(
    spec: ValidateSpec,
    *,
    out: Path | None = None,
    on_result: Callable[[CheckResult], None] = lambda _: None,
    on_document: Callable[[ValidateDocument], None] = lambda _: None,
) -> ValidateDocument:
    """Run the checks, write `out`/validate.json and hand the document to `on_document`.

    Ctrl-C or SIGTERM (docker stop, Kubernetes, timeout) stops the run like this: the
    checks that finished keep their results, the one that was running fails as stopped, the
    rest are skipped as not run; validate.json is written and `on_document` sees it, then
    the stop is raised.

    Raises:
        Interrupted: Ctrl-C (exit 130), or `Terminated` for SIGTERM (exit 143).
    """
    results: list[CheckResult] = []

    def keep(result: CheckResult) -> None:
        results.append(result)
        on_result(result)

    stopped: Interrupted | None = None
    with sigterm_as_interrupt() as signals:
        try:
            signals.run(run_checks(spec, out=out, on_result=keep))
        except KeyboardInterrupt:
            how = "SIGTERM" if signals.terminated else "Ctrl-C"
            for result in _not_finished(spec, {r.name for r in results}, how):
                keep(result)
            kind = Terminated if signals.terminated else Interrupted
            stopped = kind(
                f"validate stopped by {how}; validate.json holds the checks that finished",
                fix="run validate again to check the rest",
            )
        finally:
            signals.forward = False  # validate.json is never cut short
    doc = validate_document(results, spec)
    if out is not None:
        text = jsontext.dumps(doc.as_json(), indent=2, ensure_ascii=True, what="validate.json")
        (out / "validate.json").write_text(text + "\n", encoding="utf-8")
    on_document(doc)
    if stopped is not None:
        raise stopped
    return doc


def _not_finished(spec: ValidateSpec, done: set[str], how: str) -> list[CheckResult]:
    """The results of the checks a stop left: the running one failed, the rest not run."""
    left = []
    running = True
    for group, name, _ in CHECKS:
        if name in done:
            continue
        if not _selected(spec, group, name):
            left.append(CheckResult(name, "skip", "not selected (--only/--skip)", 0.0))
        elif running:
            left.append(CheckResult(name, "fail", f"stopped by {how} before it finished", 0.0))
            running = False
        else:
            left.append(CheckResult(name, "skip", f"not run: stopped by {how}", 0.0))
    return left
