"""Assemble a bench run's summary.json and discover what the server is (shell)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from servekit.analyze.slo import Slo
from servekit.analyze.summarize import point_metrics, point_to_json, summary_document
from servekit.analyze.traffic import RATE_DIGITS, ScheduleBound, traffic_blocks, with_traffic
from servekit.bench.pool import WorkerPool
from servekit.bench.resummarize import write_run_info
from servekit.bench.runner import Progress, run_points
from servekit.bench.signals import StopSignals, sigterm_as_interrupt
from servekit.bench.spec import BenchSpec, PointOutcome, PointSpec, ProgressSink
from servekit.bench.store import (
    RUN_FILES,
    RecordWriter,
    check_run_dir,
    write_summary,
    write_summary_tables,
)
from servekit.client.endpoint import open_endpoint
from servekit.client.http import CONNECT
from servekit.client.models import malformed_models, model_entries, model_len
from servekit.client.transport import CONNECT_FIX, Transport
from servekit.client.urls import redact_url
from servekit.errors import (
    ChecksFailed,
    EndpointError,
    Interrupted,
    ServekitError,
    Terminated,
    UsageError,
)
from servekit.results.summary import (
    ClientBlock,
    ServerBlock,
    SessionInfo,
    SloBlock,
    Summary,
    Target,
    TraceInfo,
    Workload,
)
from servekit.workload import traces
from servekit.workload.sessions import SessionsSpec
from servekit.workload.traces import Trace


@dataclasses.dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the server says it is: its first model's /v1/models entry and /version."""

    model: str
    max_model_len: int | None
    version: str | None
    model_entry: dict[str, JsonValue]


async def discover(
    base_url: str, headers: dict[str, str], *, transport: Transport | None = None
) -> ServerInfo:
    """Read /v1/models (the served model, max_model_len) and /version.

    Raises:
        EndpointError: the server does not answer /v1/models with a model.
    """
    async with open_endpoint(base_url, headers, transport=transport) as server:
        reply = await server.models()
        if reply.error_kind == CONNECT:
            raise EndpointError(reply.error or f"cannot connect to {base_url}", fix=CONNECT_FIX)
        if reply.error_kind is not None and reply.status in (None, 200):
            raise EndpointError(
                f"cannot reach {base_url}/v1/models ({reply.error_kind}: {reply.error})",
                fix="check --url and that the server is up",
            )
        entries = model_entries(reply.doc)
        if not entries:
            raise EndpointError(
                f"{base_url}/v1/models lists no model", fix="pass --model or check the server"
            )
        if problem := malformed_models(entries):
            raise EndpointError(
                f"malformed {base_url}/v1/models reply: {problem}",
                fix="check the server (or the proxy in front of it) and its version",
            )
        entry = {k: v for k, v in entries[0].items() if k in _MODEL_FIELDS}
        version = await server.version()
    return ServerInfo(str(entry["id"]), model_len(entry), version, entry)


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
    token_ids: bool | None = None,
    server: ServerInfo | None = None,
    command: list[str] | None = None,
) -> Summary:
    """The run's summary.json (docs/metrics.md); the API key is never part of it.

    A replay's workload states the trace's mean lengths and request count, a session run's
    its sessions per point (what was sent, not the unused defaults)."""
    trace = trace_info(spec.trace)
    input_len, output_len, per_point = spec.input_len, spec.output_len, spec.requests_per_point
    if spec.trace is not None and (means := traces.mean_lengths(spec.trace)) is not None:
        (input_len, output_len), per_point = means, len(spec.trace.requests)
    elif spec.sessions is not None:
        per_point = spec.sessions.sessions_per_point
    agent = None if spec.sessions is None else spec.sessions.agent is not None
    points = []
    for o in outcomes:
        metrics = point_metrics(o.records, slo=slo)
        point = point_to_json(
            metrics,
            concurrency=o.spec.concurrency,
            rate_rps=o.spec.rate_rps,
            server=o.server,
            client=o.client
            if o.client is not None
            else ClientBlock(valid=not o.warnings, warnings=o.warnings),
        )
        blocks = traffic_blocks(
            o.records,
            o.server,
            duration_s=metrics.duration_s,
            agent=agent,
            schedule=schedule_bound(spec, o.spec),
            implied_hit_rate=trace.implied_hit_rate
            if trace is not None and o.spec.schedule is not None
            else None,
        )
        points.append(with_traffic(point, blocks))
    doc = summary_document(
        servekit_version=version,
        started_at=started_at,
        target=Target(
            url=redact_url(spec.base_url),
            model=spec.model,
            server_version=server_version,
            profile=profile,
            model_info=server.model_entry if server else None,
        ),
        workload=Workload(
            api=spec.api,
            input_len=input_len,
            input_len_method=input_len_method,
            return_token_ids=token_ids,
            output_len=output_len,
            temperature=spec.temperature,
            requests_per_point=per_point,
            warmup=spec.warmup,
            seed=spec.seed,
            chat_template_kwargs=spec.chat_template_kwargs,
            slo=None if slo is None else SloBlock(text=slo.text()),
            duration_per_point_s=spec.duration_per_point_s,
            tools=[tool_name(t) for t in spec.tools],
            dataset_prompts=len(spec.dataset) if spec.dataset else None,
            shared_prefix=spec.shared_prefix,
            workers=spec.workers,
            trace=trace,
            sessions=session_info(spec.sessions),
        ),
        points=points,
    )  # fmt: skip
    if command is not None:
        doc = doc.model_copy(update={"command": redact_argv(command)})
    return doc


def schedule_bound(spec: BenchSpec, point: PointSpec) -> ScheduleBound | None:
    """What a point with an explicit schedule (a trace replay) asked for: the sends its
    schedule holds (up to the point's request count) and the run's p99 lag bound."""
    planned = point.planned_sends(spec.requests_per_point)
    return None if planned is None else ScheduleBound(planned, spec.max_schedule_lag_ms)


def trace_info(trace: Trace | None) -> TraceInfo | None:
    """The summary's description of a replayed trace, with the hit rate its hash ids imply
    (None without one)."""
    if trace is None:
        return None
    rate = traces.implied_hit_rate(trace)
    return TraceInfo(
        file=trace.file,
        format=trace.format,
        requests=len(trace.requests),
        time_scale=trace.time_scale,
        start_s=trace.start_s,
        duration_s=trace.duration_s,
        block_tokens=trace.block_tokens,
        implied_hit_rate=None if rate is None else round(rate, RATE_DIGITS),
        skipped=trace.skipped or None,
    )


def session_info(sessions: SessionsSpec | None) -> SessionInfo | None:
    """The summary's description of the sessions a run sends (None without them)."""
    if sessions is None:
        return None
    agent = sessions.agent
    turns = max((len(s.turns) for s in sessions.sessions), default=0)
    return SessionInfo(
        source=sessions.source,
        sessions=sessions.sessions_per_point,
        turns_max=agent.max_turns if agent is not None else turns,
        think_time=sessions.think_time.spelling,
        agent=agent is not None,
        tool_latency=None if agent is None else agent.tool_latency.spelling,
        repeated=sessions.repeated,
    )


def tool_name(tool: dict[str, Any]) -> str | None:
    """The name of an OpenAI tool definition, when it has one."""
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def run_bench(
    spec: BenchSpec,
    points: list[PointSpec],
    out: Path,
    *,
    version: str,
    slo: Slo | None = None,
    live: ProgressSink | None = None,
    profile: str | None = None,
    command: list[str] | None = None,
    on_summary: Callable[[Summary], None] | None = None,
    max_failure_rate: float = 0.0,
    force: bool = False,
) -> Summary:
    """Discover the server, run the points, write records, summary.json, .csv and .md.

    The model defaults to the server's first model. The summary of every finished point is
    written even when the sweep stops early; `on_summary` sees it either way (the CLI prints
    its table), and then a stopped sweep raises its reason. A directory that holds a run's
    results is refused before anything is sent, unless `force` (they are replaced). run.json
    is written as the run starts and as each point begins, for `bench --resummarize`.

    Raises:
        Interrupted: Ctrl-C (exit 130), or `Terminated` for SIGTERM (exit 143); the records
            and the summary cover the requests that finished.
        EndpointError: the server went away or stopped answering during the sweep.
        ChecksFailed: more than `max_failure_rate` of the requests failed (exit 3).
        ServekitError: `out` holds a run's results and `force` is off.
    """
    check_run_dir(out, RUN_FILES, force=force)
    with sigterm_as_interrupt() as signals:
        try:
            info = signals.run(discover(spec.base_url, spec.headers))
        except KeyboardInterrupt:
            raise _stop_error(signals, "before any request was sent; nothing was written") from None
        if not spec.model:
            spec = dataclasses.replace(spec, model=info.model)
        if spec.trace is not None and info.max_model_len is not None:
            check_trace_fits(spec.trace, info.max_model_len)
        started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        progress = Progress()

        def summarize(outcomes: list[PointOutcome]) -> Summary:
            # redacted: the server's own text (model, version, warnings) is in it
            return spec.redactor.redact_document(bench_summary(
                spec, outcomes, version=version, started_at=started,
                server_version=info.version, profile=profile, slo=slo,
                input_len_method=progress.input_len_method, token_ids=progress.token_ids,
                server=info, command=command,
            ))  # fmt: skip

        def on_point(point: PointSpec, total: int) -> None:
            write_run_info(
                out,
                summarize([]),
                points,
                progress.outcomes,
                spec.redactor,
                max_schedule_lag_ms=spec.max_schedule_lag_ms,
            )  # for --resummarize
            if live:
                live.start_point(point.label, total)

        stopped: ServekitError | None = None
        crash: Exception | None = None
        signals.forward = False  # while worker processes start, a SIGTERM is only noted
        with RecordWriter(out, spec.redactor, force=force) as writer, _pool(spec) as pool:
            try:
                write_run_info(
                    out,
                    summarize([]),
                    points,
                    [],
                    spec.redactor,
                    max_schedule_lag_ms=spec.max_schedule_lag_ms,
                )
                signals.forward = True
                if signals.terminated:  # it came while the pool started
                    raise KeyboardInterrupt
                run = run_points(
                    spec,
                    points,
                    writer,
                    progress=progress,
                    on_record=live.record if live else lambda _: None,
                    on_point=on_point,
                    pool=pool,
                )
                stopped = signals.run(run).stopped
            except KeyboardInterrupt:
                how = "stopped by SIGTERM" if signals.terminated else "interrupted"
                _keep_partial(progress, f"{how}: the point did not finish")
                stopped = _stop_error(signals, "records and the summary cover the requests "
                                      "that finished")  # fmt: skip
            except Exception as exc:  # a bug: keep what finished, then let it surface
                _keep_partial(progress, f"stopped by an internal error: {type(exc).__name__}")
                crash = exc
            finally:
                signals.forward = False  # a SIGTERM from here on never cuts the summary short
        summary = summarize(progress.outcomes)
        write_run_info(
            out,
            summary,
            points,
            progress.outcomes,
            spec.redactor,
            max_schedule_lag_ms=spec.max_schedule_lag_ms,
        )
        write_summary(out, summary)
        write_summary_tables(out, summary)
    if crash is not None:
        raise crash
    if on_summary is not None:
        on_summary(summary)
    if stopped is None and signals.terminated:  # SIGTERM while the summary was written
        stopped = _stop_error(signals, "the run had finished and its summary is written")
    if stopped is not None:
        raise stopped
    if (failed := too_many_failures(progress.outcomes, max_failure_rate, out)) is not None:
        raise failed
    return summary


def check_trace_fits(trace: Trace, max_model_len: int) -> None:
    """Refuse a replay whose requests the server cannot hold (its /v1/models max_model_len),
    before anything is sent (a profile's max_model_len is checked when the trace is read).

    Raises:
        UsageError: the first request over it, by its line in the trace file.
    """
    for request in trace.requests:
        if (total := request.input_len + request.output_len) > max_model_len:
            raise UsageError(
                f"{trace.file}:{request.line}: {request.input_len} input + "
                f"{request.output_len} output = {total} tokens exceeds the server's "
                f"max_model_len {max_model_len}; nothing was sent",
                fix="window the trace past it (--trace-start, --max-requests) or serve a "
                "longer max_model_len",
            )


FAILURE_FIXES = {
    "context_length": "shorten the prompts (--input-len, --output-len, the trace or the "
    "sessions' turns) or raise the server's max_model_len",
    "timeout": "raise --timeout or lower the load",
    "http_429": "the server refuses the load: lower --concurrency/--rate or raise its limits",
    "http_503": "the server refuses the load: lower --concurrency/--rate or raise its limits",
    "connect": CONNECT_FIX,
    "invalid_usage": "the server's usage counts are wrong: check its version and proxy",
}
"""The fix for a run whose most common failure is this class."""


def too_many_failures(
    outcomes: list[PointOutcome], max_failure_rate: float, out: Path
) -> ChecksFailed | None:
    """The exit-3 error of a run where more than `max_failure_rate` of requests failed,
    naming the classes and the fix for the most common one; None otherwise."""
    records = [r for o in outcomes for r in o.records]
    kinds = Counter(r.error_kind for r in records if r.error_kind is not None)
    failed = sum(kinds.values())
    if not records or failed <= max_failure_rate * len(records):
        return None
    classes = ", ".join(f"{kind} x{n}" for kind, n in kinds.most_common())
    top = kinds.most_common(1)[0][0]
    fix = FAILURE_FIXES.get(top, f"see each record's error in {out / 'records.jsonl'}")
    return ChecksFailed(
        f"{failed} of {len(records)} requests failed ({classes})",
        fix=f"{fix} (--max-failure-rate {math.ceil(100 * failed / len(records)) / 100:g} "
        "would accept this run)",
    )


def _stop_error(signals: StopSignals, kept: str) -> Interrupted:
    """Ctrl-C (exit 130) or SIGTERM (exit 143), saying what was kept."""
    fix = "run the remaining points again to complete the sweep"
    if signals.terminated:
        return Terminated(f"stopped by SIGTERM; {kept}", fix=fix)
    return Interrupted(f"interrupted; {kept}", fix=fix)


@contextlib.contextmanager
def _pool(spec: BenchSpec) -> Iterator[WorkerPool | None]:
    if spec.workers <= 1:
        yield None
        return
    with WorkerPool(spec, spec.workers) as pool:
        yield pool


def _keep_partial(progress: Progress, note: str) -> None:
    if progress.current is not None and progress.current_records:
        records = list(progress.current_records)
        partial = PointOutcome(progress.current, records, ServerBlock(), [note])
        progress.outcomes.append(partial)
