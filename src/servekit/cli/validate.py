"""`servekit validate` (shell): the functional gate; a table, --json, exit 3 on a failure."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import click

from servekit import jsontext
from servekit.cli._output import (
    FiniteFloat,
    emit_json,
    json_option,
    make_out_dir,
    parse_numbers,
    profiles_dir_option,
    stdout_console,
)
from servekit.client.urls import redact_url
from servekit.errors import ChecksFailed, UsageError
from servekit.profiles import load_profile
from servekit.report.tables import checks_table
from servekit.validate.context import ValidateSpec
from servekit.validate.runner import CheckResult, check_names, run_checks, validate_document


# fmt: off
@click.command("validate")
@click.option("--url", help="Server base URL [the profile's port on 127.0.0.1].")
@click.option("--model", help="Served name expected in /v1/models [profile's, else the first].")
@click.option("--profile", help="A deployment profile: URL, served name, max_model_len, ladder.")
@profiles_dir_option
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
              help="Environment variable holding the API key (never written anywhere).")
@click.option("--only", multiple=True, help="Run only these checks or groups (comma list).")
@click.option("--skip", multiple=True, help="Skip these checks or groups (comma list).")
@click.option("--ladder", help="Concurrency levels of the ladder [1,2,4,8,16].")
@click.option("--long-context-tokens", type=click.IntRange(min=16),
              help="Prompt tokens of the long-context check [90% of max_model_len].")
@click.option("--thinking-kwargs", help='chat_template_kwargs that turn thinking on '
              '[the profile\'s, else {"thinking_mode": "enabled"}].')
@click.option("--log", "log_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The engine's log: failures quote its lines and name the known issue.")
@click.option("--reference-url", help="The same model without speculation, to compare outputs.")
@click.option("--timeout", type=FiniteFloat(min=1), default=180.0, show_default=True,
              help="Seconds per check (x4 for the ladder and long context).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Keep validate.json and transcripts.jsonl (API key redacted) here.")
@json_option
def validate_command(as_json: bool, out: Path | None, **opts: Any) -> None:
    # fmt: on
    """Check an endpoint is fit to serve: health, chat, reasoning, tools, long context, ladder."""
    spec = _spec(opts)
    if out is not None:
        make_out_dir(out)
    key = os.environ.get(opts["api_key_env"]) or None

    def show(result: CheckResult) -> None:
        if not as_json:
            click.echo(f"{result.status:>4}  {result.name}: {result.detail}", err=True)

    results = asyncio.run(run_checks(spec, out=out, secret=key, on_result=show))
    doc = validate_document(results, spec, url=redact_url(spec.base_url))
    if out is not None:
        text = jsontext.dumps(doc.as_json(), indent=2, ensure_ascii=True, what="validate.json")
        (out / "validate.json").write_text(text + "\n", encoding="utf-8")
    if as_json:
        emit_json(doc.as_json())
    else:
        title = f"validate {redact_url(spec.base_url)}"
        stdout_console().print(checks_table(doc.checks, title=title))
    if not doc.passed:
        failed = ", ".join(doc.failed())
        raise ChecksFailed(f"validate failed: {failed}", fix="see each failed check's detail above")


_EXAMPLE = '{"thinking_mode": "enabled"}'


def _spec(opts: dict[str, Any]) -> ValidateSpec:
    name = opts["profile"]
    prof = load_profile(name, extra_dirs=opts["profiles_dirs"]) if name else None
    url = opts["url"] or (f"http://127.0.0.1:{prof.deploy.port}" if prof else None)
    if url is None:
        raise UsageError("--url is required without --profile", fix="e.g. --url http://127.0.0.1:8000")
    thinking: Any = prof.validate_defaults.thinking_kwargs if prof else None
    if opts["thinking_kwargs"]:
        try:
            thinking = json.loads(opts["thinking_kwargs"])
        except json.JSONDecodeError as exc:
            raise UsageError(f"--thinking-kwargs is not JSON ({exc.msg})",
                             fix=f"quote it for the shell, e.g. '{_EXAMPLE}'") from None
        if not isinstance(thinking, dict):
            raise UsageError("--thinking-kwargs must be a JSON object",
                             fix=f"e.g. {_EXAMPLE}")
    ladder = parse_numbers(opts["ladder"], int, "--ladder") if opts["ladder"] else (
        prof.validate_defaults.ladder if prof else [1, 2, 4, 8, 16])
    key = os.environ.get(opts["api_key_env"])
    return ValidateSpec(
        base_url=url.rstrip("/"),
        model=opts["model"] or (prof.serve_args.served_model_name if prof else None),
        headers={"Authorization": f"Bearer {key}"} if key else {},
        expected_max_model_len=prof.serve_args.max_model_len if prof else None,
        thinking_kwargs=thinking, thinking_expected=thinking is not None,
        ladder=tuple(int(n) for n in ladder),
        long_context_tokens=opts["long_context_tokens"] or (
            prof.validate_defaults.long_context_tokens if prof else None),
        log_file=opts["log_file"], reference_url=(opts["reference_url"] or "").rstrip("/") or None,
        only=check_names(opts["only"], "--only"), skip=check_names(opts["skip"], "--skip"),
        check_timeout_s=opts["timeout"],
    )  # fmt: skip
