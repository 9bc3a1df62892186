"""Assemble a bench run's summary.json and discover what the server is (shell for discovery)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from servekit.analyze.summarize import Slo, point_metrics, point_to_json, summary_document
from servekit.bench.pool import WorkerPool
from servekit.bench.runner import Progress, run_points
from servekit.bench.spec import BenchSpec, PointOutcome, PointSpec
from servekit.bench.store import RecordWriter, write_summary, write_summary_tables
from servekit.errors import EndpointError, Interrupted, ServekitError
from servekit.report.live import LiveProgress


def redact_url(url: str) -> str:
    """The URL without any user:password part, safe to write to files and logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


@dataclasses.dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the server says it is: its first model's /v1/models entry and /version."""

    model: str
    max_model_len: int | None
    version: str | None
    model_entry: dict[str, object]


async def discover(base_url: str, headers: dict[str, str]) -> ServerInfo:
    """Read /v1/models (the served model, max_model_len) and /version.

    Raises:
        EndpointError: the server does not answer /v1/models with a model.
    """
    async with aiohttp.ClientSession(headers=headers) as session:
        try:
            async with session.get(f"{base_url}/v1/models", timeout=aiohttp.ClientTimeout(10)) as r:
                doc: Any = await r.json(content_type=None) if r.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise EndpointError(
                f"cannot reach {base_url}/v1/models ({type(exc).__name__})",
                fix="check --url and that the server is up",
            ) from None
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list) or not data or not isinstance(data[0], dict):
            raise EndpointError(
                f"{base_url}/v1/models lists no model", fix="pass --model or check the server"
            )
        entry = {k: v for k, v in data[0].items() if k in _MODEL_FIELDS}
        max_len = entry.get("max_model_len")
        version = None
        try:
            async with session.get(f"{base_url}/version", timeout=aiohttp.ClientTimeout(5)) as r:
                if r.status == 200:
                    v = await r.json(content_type=None)
                    version = str(v.get("version")) if isinstance(v, dict) else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            version = None
    return ServerInfo(
        str(entry.get("id")), max_len if isinstance(max_len, int) else None, version, entry
    )


_MODEL_FIELDS = ("id", "root", "owned_by", "max_model_len", "parent", "created")


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with credentials removed from any URL in it."""
    out = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if eq and flag.startswith("-"):
            out.append(f"{flag}={redact_url(value)}")
        else:
            out.append(redact_url(arg) if "://" in arg else arg)
    return out


def bench_summary(
    spec: BenchSpec,
    outcomes: list[PointOutcome],
    *,
    version: str,
    started_at: str,
    server_version: str | None,
    profile: str | None,
    slo: Slo | None = None,
    input_len_method: str = "",
    server: ServerInfo | None = None,
    command: list[str] | None = None,
) -> dict[str, object]:
    """The run's summary.json (DESIGN.md section 4); the API key is never part of it."""
    points = [
        point_to_json(
            point_metrics(o.records, slo=slo),
            concurrency=o.spec.concurrency,
            rate_rps=o.spec.rate_rps,
            server=o.server,
            client=o.client or {"valid": not o.warnings, "warnings": o.warnings},
        )
        for o in outcomes
    ]
    doc = summary_document(
        servekit_version=version,
        started_at=started_at,
        target={
            "url": redact_url(spec.base_url),
            "model": spec.model,
            "server_version": server_version,
            "profile": profile,
            "model_info": server.model_entry if server else None,
        },
        workload={
            "api": spec.api,
            "input_len": spec.input_len,
            "input_len_method": input_len_method,
            "output_len": spec.output_len,
            "temperature": spec.temperature,
            "requests_per_point": spec.requests_per_point,
            "warmup": spec.warmup,
            "seed": spec.seed,
            "chat_template_kwargs": spec.chat_template_kwargs,
            "slo": None if slo is None else dataclasses.asdict(slo),
            "duration_per_point_s": spec.duration_per_point_s,
            "tools": [t.get("function", {}).get("name") for t in spec.tools],
            "dataset_prompts": len(spec.dataset) if spec.dataset else None,
            "shared_prefix": spec.shared_prefix,
            "workers": spec.workers,
        },
        points=points,
    )
    if command is not None:
        doc["command"] = redact_argv(command)
    return doc


def run_bench(
    spec: BenchSpec,
    points: list[PointSpec],
    out: Path,
    *,
    version: str,
    slo: Slo | None = None,
    live: LiveProgress | None = None,
    profile: str | None = None,
    command: list[str] | None = None,
    on_summary: Callable[[dict[str, object]], None] | None = None,
) -> dict[str, object]:
    """Discover the server, run the points, write records, summary.json, .csv and .md.

    The model defaults to the server's first model. The summary of every finished point is
    written even when the sweep stops early; `on_summary` sees it either way (the CLI prints
    its table), and then a stopped sweep raises its reason.

    Raises:
        Interrupted: Ctrl-C; the records and summary cover the requests that finished.
        EndpointError: the server went away or stopped answering during the sweep.
    """
    info = asyncio.run(discover(spec.base_url, spec.headers))
    if not spec.model:
        spec = dataclasses.replace(spec, model=info.model)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    progress = Progress()
    stopped: ServekitError | None = None
    crash: Exception | None = None
    with RecordWriter(out) as writer, _pool(spec) as pool:
        try:
            run = run_points(
                spec,
                points,
                writer,
                progress=progress,
                on_record=live.record if live else lambda _: None,
                on_point=(lambda p, n: live.start_point(p.label, n))
                if live
                else lambda _p, _n: None,
                pool=pool,
            )
            stopped = asyncio.run(run).stopped
        except KeyboardInterrupt:
            _keep_partial(progress, "interrupted: the point did not finish")
            stopped = Interrupted(
                "interrupted; records and the summary cover the requests that finished",
                fix="run the remaining points again to complete the sweep",
            )
        except Exception as exc:  # a bug: keep what finished, then let it surface
            _keep_partial(progress, f"stopped by an internal error: {type(exc).__name__}")
            crash = exc
    summary = bench_summary(
        spec,
        progress.outcomes,
        version=version,
        started_at=started,
        server_version=info.version,
        profile=profile,
        slo=slo,
        input_len_method=progress.input_len_method,
        server=info,
        command=command,
    )
    write_summary(out, summary)
    write_summary_tables(out, summary)
    if crash is not None:
        raise crash
    if on_summary is not None:
        on_summary(summary)
    if stopped is not None:
        raise stopped
    return summary


@contextlib.contextmanager
def _pool(spec: BenchSpec) -> Iterator[WorkerPool | None]:
    if spec.workers <= 1:
        yield None
        return
    with WorkerPool(spec, spec.workers) as pool:
        yield pool


def _keep_partial(progress: Progress, note: str) -> None:
    if progress.current is not None and progress.current_records:
        partial = PointOutcome(progress.current, list(progress.current_records), {}, [note])
        progress.outcomes.append(partial)
