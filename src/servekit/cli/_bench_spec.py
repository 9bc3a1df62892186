"""`servekit bench` options (and a profile) as a BenchSpec and its points (shell)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from servekit.bench.spec import BenchSpec, PointSpec
from servekit.cli._bench_sessions import sessions_input
from servekit.cli._bench_trace import trace_input
from servekit.cli._output import check_load_options
from servekit.cli._unused_options import refuse_unused
from servekit.cli._values import parse_json_object, parse_numbers, read_text_option
from servekit.client.address import server_address
from servekit.errors import UsageError
from servekit.profiles import Profile, load_profile
from servekit.workload.datasets import load_dataset_text, parse_length
from servekit.workload.tools import parse_tools


def bench_inputs(opts: dict[str, Any]) -> tuple[BenchSpec, list[PointSpec], Profile | None]:
    """The spec, the points and the profile (if any) for one `servekit bench` call.

    A profile supplies the URL (its published port on 127.0.0.1), the served model name and
    the bench defaults (concurrency levels, input and output lengths) that options leave unset.
    """
    prof = (
        load_profile(opts["profile"], extra_dirs=opts["profiles_dirs"]) if opts["profile"] else None
    )
    url = opts["url"] or (f"http://127.0.0.1:{prof.deploy.port}" if prof else None)
    if url is None:
        raise UsageError(
            "--url is required without --profile", fix="e.g. --url http://127.0.0.1:8000"
        )
    address = server_address(
        url, api_key=os.environ.get(opts["api_key_env"]), key_name=opts["api_key_env"]
    )
    refuse_unused(opts)
    replay = trace_input(opts, prof.serve_args.max_model_len if prof else None)  # no --rate
    concurrency, rate = opts["concurrency"], opts["rate"]
    if prof and concurrency is None and rate is None and replay is None:
        concurrency = ",".join(str(c) for c in prof.bench_defaults.concurrency)
    if replay is None:
        check_load_options(concurrency, rate, opts["arrival"])
    kwargs = (
        parse_json_object(opts["chat_template_kwargs"], "--chat-template-kwargs")
        if opts["chat_template_kwargs"]
        else None
    )
    lens = (prof.bench_defaults.input_len, prof.bench_defaults.output_len) if prof else (1024, 128)
    ilen_text, olen_text = opts["input_len"] or str(lens[0]), opts["output_len"] or str(lens[1])
    ilen = parse_length(ilen_text, "--input-len")
    olen = parse_length(olen_text, "--output-len")
    if opts["shared_prefix"] and opts["shared_prefix"] >= ilen.mean // 2:
        raise UsageError(
            f"--shared-prefix {opts['shared_prefix']} leaves too little of --input-len {ilen.mean}",
            fix="keep the shared prefix under half the input",
        )
    dataset: Path | None = opts["dataset"]
    items = (
        load_dataset_text(read_text_option(dataset, "--dataset"), str(dataset)) if dataset else None
    )
    tools = (
        parse_tools(read_text_option(opts["tools"], "--tools"), str(opts["tools"]))
        if opts["tools"]
        else ()
    )
    resolved = {"concurrency": concurrency, "input_len": ilen_text, "output_len": olen_text}
    sessions = sessions_input(opts | resolved, tools)  # with the profile's defaults
    model = opts["model"] or (prof.serve_args.served_model_name or prof.model.path if prof else "")
    spec = BenchSpec(
        base_url=address.base_url,
        model=model,
        api=opts["api"],
        input_len=ilen.mean,
        output_len=olen.mean,
        temperature=opts["temperature"],
        requests_per_point=opts["requests_per_point"],
        warmup=opts["warmup"],
        seed=opts["seed"],
        headers=address.headers,
        redactor=address.redactor,
        chat_template_kwargs=kwargs,
        timeout_s=opts["timeout"],
        input_dist=ilen if ilen.kind != "fixed" else None,
        output_dist=olen if olen.kind != "fixed" else None,
        dataset=tuple(items) if items else None,
        shared_prefix=opts["shared_prefix"],
        tokenizer=opts["tokenizer"],
        duration_per_point_s=opts["duration_per_point"],
        tools=tools,
        workers=opts["workers"],
        min_tokens=opts["min_tokens"],
        token_ids={"auto": None, "on": True, "off": False}[opts["token_ids"]],
        metrics_interval_s=opts["metrics_interval"],
        trace=replay[0] if replay else None,
        sessions=sessions,
        max_schedule_lag_ms=opts["max_schedule_lag_ms"],
    )
    if replay is not None:
        return spec, [replay[1]], prof
    points = [
        PointSpec(f"c={int(c)}", concurrency=int(c))
        for c in parse_numbers(concurrency, int, "--concurrency")
    ]
    points += [
        PointSpec(
            f"rate={r:g}",
            rate_rps=r,
            arrival=opts["arrival"],
            max_concurrency=opts["max_concurrency"],
        )
        for r in parse_numbers(rate, float, "--rate", allow_inf=True)
    ]
    return spec, points, prof
