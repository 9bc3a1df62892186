"""`servekit bench` (shell): a streaming load test; records, summary.json and a table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    redacted_errors,
    stdout_console,
)
from servekit.cli._token_options import token_options
from servekit.cli._traffic_options import traffic_options
from servekit.cli._values import FiniteFloat
from servekit.errors import UsageError

if TYPE_CHECKING:
    from servekit.results.summary import Summary


# fmt: off
@click.command("bench")
@click.option("--url", help="Server base URL without /v1, e.g. http://127.0.0.1:8000 (user:pw@ "
              "is sent as basic auth) [the profile's port].")
@click.option("--model", default="", help="Model name to request [profile's, else the server's].")
@click.option("--profile", help="A deployment profile: its URL, model and bench defaults.")
@profiles_dir_option
@click.option("--concurrency", help="Closed-loop concurrency levels, e.g. 1,4,16,128.")
@click.option("--rate", help="Open-loop arrival rates in requests/s, e.g. 0.5,1,2 (inf: at once).")
@click.option("--arrival", default="poisson", show_default=True,
              help="poisson | gamma:SHAPE | constant (with --rate).")
@click.option("--max-concurrency", type=click.IntRange(min=1), help="Cap in-flight (--rate).")
@click.option("--requests-per-point", type=click.IntRange(min=1), default=64, show_default=True,
              help="Requests per point (with --duration-per-point: at most this many).")
@click.option("--duration-per-point", type=FiniteFloat(min=0.1),
              help="Seconds per point; no request starts after it (the point also ends when "
                   "--requests-per-point requests have run).")
@click.option("--warmup", type=click.IntRange(min=0), default=4, show_default=True)
@click.option("--input-len", help="Prompt tokens: N, N:uniform or N:normal:SD [1024].")
@click.option("--output-len", help="Output tokens: N, N:uniform or N:normal:SD [128].")
@click.option("--tokenizer", type=click.Path(exists=True, dir_okay=False),
              help="A tokenizer.json to size prompts when the server has no /tokenize.")
@click.option("--shared-prefix", type=click.IntRange(min=0), default=0, show_default=True,
              help="Tokens every synthetic prompt shares at its start (prefix caching).")
@click.option("--dataset", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Prompts from a JSONL file (prompt or messages) or a ShareGPT JSON file.")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat",
              show_default=True)
@click.option("--temperature", type=FiniteFloat(min=0), default=0.0, show_default=True)
@click.option("--chat-template-kwargs", help='JSON object, e.g. \'{"thinking_mode": "enabled"}\'.')
@click.option("--tools", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A JSON list of OpenAI tool definitions sent with every chat request.")
@traffic_options
@click.option("--slo", help="The SLO for goodput, e.g. 'ttft_p99<=500ms,tpot_p99<=50ms'.")
@click.option("--timeout", type=FiniteFloat(min=0.1), default=600.0, show_default=True,
              help="Seconds one request may take before it counts as a timeout.")
@click.option("--max-failure-rate", type=FiniteFloat(min=0, max=1), default=0.0,
              show_default=True, help="Fraction of requests that may fail; past it (by "
              "default, any failure) bench exits 3 after writing the summary.")
@click.option("--workers", type=click.IntRange(min=1, max=64), default=1, show_default=True,
              help="Processes that send the load, past one client core; records merge.")
@token_options
@click.option("--metrics-interval", type=FiniteFloat(min=0), default=0.25, show_default=True,
              help="Seconds between /metrics samples during a point; 0 scrapes only around it.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
              help="Environment variable holding the API key (never written anywhere).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Run directory (required): records.jsonl, summary.json/.csv/.md, run.json.")
@click.option("--force", is_flag=True,
              help="Replace the results a previous run left in --out (refused without it).")
@click.option("--resummarize", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Send nothing; rebuild DIR's summary from run.json and records.jsonl.")
@json_option
def bench_command(as_json: bool, out: Path | None, slo: str | None, force: bool,
                  resummarize: Path | None, max_failure_rate: float, **opts: Any) -> None:
    # fmt: on
    """Load-test a server: exact streaming timing, per-request records, summary per point.

    Exit codes: 0 done, 1 error (the server stopped answering), 3 more requests failed than
    --max-failure-rate allows, 130 Ctrl-C, 143 SIGTERM; the summary of what finished is
    written either way.
    """
    from servekit import __version__
    from servekit.analyze.slo import parse_slo
    from servekit.bench.summary import run_bench
    from servekit.cli._bench_spec import bench_inputs
    from servekit.cli._rebuild import rebuild_summary
    from servekit.report.live import LiveProgress
    if resummarize is not None:
        return _show(rebuild_summary(resummarize, force=force), as_json)
    if out is None:
        raise UsageError("--out DIR is required", fix="name the run directory, e.g. --out runs/c16")
    spec, points, prof, _ = bench_inputs(opts)
    objectives = parse_slo(slo, option="--slo") if slo else None
    written: list[Summary] = []  # the summary, also when the sweep stops and raises
    try:
        with redacted_errors(spec.redactor), LiveProgress(enabled=not as_json) as live:
            run_bench(
                spec, points, out, version=__version__, slo=objectives, live=live,
                profile=prof.name if prof else None, command=["servekit", *sys.argv[1:]],
                on_summary=written.append, force=force, max_failure_rate=max_failure_rate,
            )
    finally:
        if written:
            _show(written[0], as_json)


def _show(summary: Summary, as_json: bool) -> None:
    from servekit.report.tables import summary_tables
    if as_json:
        emit_json(summary.as_json())
        return
    title = f"bench {summary.target.url or 'URL not known'} ({summary.target.model or '?'})"
    stdout_console().print(*summary_tables(summary.points, title=title))
