"""`servekit bench` options (and a profile) as a Load, a BenchSpec and its points (shell)."""

from __future__ import annotations

import os
from typing import Any

from servekit.bench.spec import BenchSpec, PointSpec, bench_points, bench_spec
from servekit.cli._load import traffic_load
from servekit.cli._load_options import LoadOptions
from servekit.cli._values import parse_json_object
from servekit.client.address import server_address
from servekit.errors import UsageError
from servekit.profiles import Profile, load_profile
from servekit.workload.load import Load


def bench_inputs(
    opts: dict[str, Any],
) -> tuple[BenchSpec, list[PointSpec], Profile | None, Load]:
    """The spec, the points, the profile (if any) and the load of one `servekit bench` call.

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
    lens = (prof.bench_defaults.input_len, prof.bench_defaults.output_len) if prof else (1024, 128)
    load = traffic_load(
        LoadOptions.of(opts),
        command="bench",
        max_model_len=prof.serve_args.max_model_len if prof else None,
        lens=lens,
        concurrency=",".join(str(c) for c in prof.bench_defaults.concurrency) if prof else None,
    )
    kwargs = (
        parse_json_object(opts["chat_template_kwargs"], "--chat-template-kwargs")
        if opts["chat_template_kwargs"]
        else None
    )
    model = opts["model"] or (prof.serve_args.served_model_name or prof.model.path if prof else "")
    target = BenchSpec(
        base_url=address.base_url,
        model=model,
        warmup=opts["warmup"],
        headers=address.headers,
        redactor=address.redactor,
        chat_template_kwargs=kwargs,
        timeout_s=opts["timeout"],
        tokenizer=opts["tokenizer"],
        workers=opts["workers"],
        min_tokens=opts["min_tokens"],
        token_ids={"auto": None, "on": True, "off": False}[opts["token_ids"]],
        metrics_interval_s=opts["metrics_interval"],
        max_schedule_lag_ms=opts["max_schedule_lag_ms"],
    )
    return bench_spec(load, target), bench_points(load), prof, load
