"""`servekit up` (shell): start an engine from a profile and follow it to readiness."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from servekit.cli._engine import state_dir_option
from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    set_option,
    stdout_console,
)
from servekit.cli._values import FiniteFloat
from servekit.errors import Interrupted
from servekit.names import RUNTIMES


@click.command("up")
@click.argument("profile")
@click.option("--runtime", type=click.Choice(RUNTIMES), default="process",
              show_default=True,
              help="process: vLLM on this machine; docker: `docker run -d` with the rendered "
              "options.")  # fmt: skip
@click.option("--launcher", type=click.Choice(("auto", "module", "vllm")), default="auto",
              show_default=True,
              help="process runtime: `python -m vllm.entrypoints.openai.api_server` (module), "
              "`vllm serve` (vllm), or module when this Python has vLLM (auto).")  # fmt: skip
@click.option("--python", "python", default=sys.executable, show_default="this interpreter",
              help="Interpreter for --launcher module.")  # fmt: skip
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Follow the startup by stage until /health answers 200.")  # fmt: skip
@click.option("--timeout", type=FiniteFloat(min=1),
              help="Seconds the start may take (default: deploy.startup_timeout_s).")  # fmt: skip
@state_dir_option
@set_option
@profiles_dir_option
@json_option
def up_command(
    profile: str, runtime: str, launcher: str, python: str, wait: bool, timeout: float | None,
    state_dir: Path | None, overrides: tuple[str, ...], profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:  # fmt: skip
    """Start the engine for PROFILE and follow its startup (weights, profiling, KV cache,
    CUDA graphs, ready), then print the KV capacity it reports.

    What was started is recorded, so `servekit down PROFILE` stops exactly that. Exit 1
    when the engine exits or is not ready in time (the log's failures and matching
    known issues are printed).
    """
    from servekit.doctor.log_analysis import analyze_log
    from servekit.profiles import load_profile
    from servekit.report.log_view import print_analysis
    from servekit.report.startup_view import print_ready, print_started, stage_progress
    from servekit.runtime.control import served_model_id, served_models
    from servekit.runtime.documents import ENGINE_DOC_VERSION, Readiness, UpDocument
    from servekit.runtime.follow import wait_until_ready
    from servekit.runtime.launch import not_ready_error, start_engine
    from servekit.runtime.state import state_dir as default_state_dir

    prof = load_profile(profile, extra_dirs=profiles_dirs, overrides=overrides)
    directory = state_dir or default_state_dir(None)
    state = start_engine(prof, directory, runtime=runtime, launcher=launcher, python=python)
    console = stdout_console()
    if not as_json:
        print_started(console, state)
    if not wait:
        if as_json:
            emit_json(UpDocument(schema_version=ENGINE_DOC_VERSION, engine=state).as_json())
        return
    limit = timeout if timeout is not None else float(prof.deploy.startup_timeout_s)
    try:
        if as_json:
            outcome = wait_until_ready(state, timeout_s=limit, on_stage=lambda *_: None)
        else:
            with stage_progress(console) as on_stage:
                outcome = wait_until_ready(state, timeout_s=limit, on_stage=on_stage)
    except KeyboardInterrupt:
        raise Interrupted(f"stopped following; {prof.name} keeps starting",
                          fix=f"servekit status/logs/down {prof.name}") from None  # fmt: skip
    text = Path(state.log_path).read_text(encoding="utf-8", errors="replace")
    analysis = analyze_log(text, model_hint=prof.model.path)
    if not outcome.ready:
        if not as_json and (analysis.figures.found_any or analysis.issues):
            print_analysis(console, analysis, state.log_path, verdict=False)
        raise not_ready_error(state, outcome, directory)
    served = served_model_id(served_models(state.url))
    if as_json:
        ready = Readiness(ready_after_s=round(outcome.elapsed_s, 1), served_model=served,
                          kv_cache_tokens=analysis.figures.kv_cache_tokens,
                          max_concurrency=analysis.figures.max_concurrency)  # fmt: skip
        emit_json(UpDocument(schema_version=ENGINE_DOC_VERSION, engine=state,
                             ready=ready).as_json())  # fmt: skip
    else:
        print_ready(console, state, outcome, analysis, served)
