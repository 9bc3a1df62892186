"""`servekit bench` (shell): a streaming load test; records, summary.json and a table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from servekit import __version__
from servekit.analyze.summarize import parse_slo
from servekit.bench.runner import BenchSpec, PointSpec
from servekit.bench.summary import run_bench
from servekit.cli._output import (
    emit_json,
    handles_errors,
    json_option,
    parse_numbers,
    stdout_console,
)
from servekit.errors import UsageError
from servekit.report.live import LiveProgress
from servekit.report.tables import points_table
from servekit.workload.datasets import load_dataset_text, parse_length
from servekit.workload.synthetic import check_arrival


# fmt: off
@click.command("bench")
@click.option("--url", required=True, help="Server base URL, e.g. http://127.0.0.1:8000.")
@click.option("--model", default="", help="Model name to request [the server's first model].")
@click.option("--concurrency", help="Closed-loop concurrency levels, e.g. 1,4,16,128.")
@click.option("--rate", help="Open-loop arrival rates in requests/s, e.g. 0.5,1,2.")
@click.option("--arrival", default="poisson", show_default=True,
              help="poisson | gamma:SHAPE | constant (with --rate).")
@click.option("--max-concurrency", type=click.IntRange(min=1), help="Cap in-flight (--rate).")
@click.option("--requests-per-point", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=4, show_default=True)
@click.option("--input-len", default="1024", show_default=True,
              help="Prompt tokens: N, N:uniform or N:normal:SD (sized with /tokenize).")
@click.option("--output-len", default="128", show_default=True,
              help="Output tokens: N, N:uniform or N:normal:SD.")
@click.option("--tokenizer", type=click.Path(exists=True, dir_okay=False),
              help="A tokenizer.json to size prompts when the server has no /tokenize.")
@click.option("--shared-prefix", type=click.IntRange(min=0), default=0, show_default=True,
              help="Tokens every synthetic prompt shares at its start (prefix caching).")
@click.option("--dataset", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Prompts from a JSONL file (prompt or messages) or a ShareGPT JSON file.")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat",
              show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--chat-template-kwargs", help='JSON object, e.g. \'{"thinking_mode": "enabled"}\'.')
@click.option("--slo", help="Goodput objectives, e.g. ttft_ms=500,tpot_ms=50,e2e_s=10.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True,
              help="Seconds one request may take before it counts as a timeout.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
              help="Environment variable holding the API key (never written anywhere).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@json_option
@handles_errors
def bench_command(url: str, model: str, concurrency: str | None, rate: str | None, arrival: str,
                  max_concurrency: int | None, requests_per_point: int, warmup: int,
                  input_len: str, output_len: str, tokenizer: str | None, shared_prefix: int,
                  dataset: Path | None,
                  api: str,
                  temperature: float,
                  chat_template_kwargs: str | None, slo: str | None, timeout: float, seed: int,
                  api_key_env: str, out: Path,
                  as_json: bool) -> None:
    # fmt: on
    """Load-test a server: exact streaming timing, per-request records, summary per point."""
    if (concurrency is None) == (rate is None):
        raise UsageError("give exactly one of --concurrency or --rate")
    check_arrival(arrival)
    try:
        kwargs = json.loads(chat_template_kwargs) if chat_template_kwargs else None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--chat-template-kwargs is not JSON ({exc.msg})") from None
    key = os.environ.get(api_key_env)
    ilen, olen = parse_length(input_len, "--input-len"), parse_length(output_len, "--output-len")
    if shared_prefix and shared_prefix >= ilen.mean // 2:
        raise UsageError(f"--shared-prefix {shared_prefix} leaves too little of --input-len "
                         f"{input_len}", fix="keep the shared prefix under half the input")
    text = dataset.read_text(encoding="utf-8") if dataset else None
    items = load_dataset_text(text, str(dataset)) if text is not None else None
    spec = BenchSpec(url.rstrip("/"), model, api, ilen.mean, olen.mean, temperature,
                     requests_per_point, warmup, seed,
                     {"Authorization": f"Bearer {key}"} if key else {}, kwargs, timeout,
                     ilen if ilen.kind != "fixed" else None,
                     olen if olen.kind != "fixed" else None,
                     tuple(items) if items else None, shared_prefix, tokenizer)
    points = [PointSpec(f"c={int(c)}", concurrency=int(c))
              for c in parse_numbers(concurrency, int, "--concurrency")]
    points += [PointSpec(f"rate={r:g}", rate_rps=r, arrival=arrival,
                         max_concurrency=max_concurrency)
               for r in parse_numbers(rate, float, "--rate")]
    objectives = parse_slo(slo) if slo else None
    with LiveProgress(enabled=not as_json) as live:
        summary, stopped = run_bench(
            spec, points, out, version=__version__, slo=objectives, live=live
        )
    if as_json:
        emit_json(summary)
    else:
        docs = summary["points"]
        assert isinstance(docs, list)
        target = summary["target"]
        assert isinstance(target, dict)
        title = f"bench {target['url']} ({target['model']})"
        stdout_console().print(points_table(docs, title=title))
    if stopped is not None:
        raise stopped
