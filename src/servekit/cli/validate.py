"""`servekit validate` (shell): the functional gate; a table, --json, exit 3 on a failure."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servekit.cli._output import (
    emit_json,
    json_option,
    make_out_dir,
    profiles_dir_option,
    redacted_errors,
    stdout_console,
)
from servekit.cli._values import FiniteFloat, parse_json_object, parse_numbers
from servekit.errors import ChecksFailed, UsageError

if TYPE_CHECKING:
    from servekit.validate.context import ValidateSpec


# fmt: off
@click.command("validate")
@click.option("--url", help="Server base URL without /v1 (user:pw@ is sent as basic auth) "
              "[the profile's port on 127.0.0.1].")
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
@click.option("--force", is_flag=True, help="Replace a previous validate.json in --out.")
@json_option
def validate_command(as_json: bool, out: Path | None, force: bool, **opts: Any) -> None:
    # fmt: on
    """Check an endpoint is fit to serve: health, chat, reasoning, tools, long context, ladder."""
    from servekit.bench.store import VALIDATE_FILES, prepare_run_dir
    from servekit.report.tables import checks_table
    from servekit.results.validate import ValidateDocument
    from servekit.validate.runner import CheckResult, run_validate
    spec = _spec(opts)
    if out is not None:
        prepare_run_dir(out, VALIDATE_FILES, force=force)
        make_out_dir(out)

    def show(result: CheckResult) -> None:  # results come redacted (spec.redactor)
        if not as_json:
            click.echo(f"{result.status:>4}  {result.name}: {result.detail}", err=True)

    def show_document(doc: ValidateDocument) -> None:
        if as_json:
            emit_json(doc.as_json())
        else:
            stdout_console().print(checks_table(doc.checks, title=f"validate {spec.base_url}"))

    with redacted_errors(spec.redactor):
        doc = run_validate(spec, out=out, on_result=show, on_document=show_document)
    if not doc.passed:
        failed = ", ".join(doc.failed())
        raise ChecksFailed(f"validate failed: {failed}", fix="see each failed check's detail above")


def _spec(opts: dict[str, Any]) -> ValidateSpec:
    from servekit.client.address import server_address
    from servekit.profiles import load_profile
    from servekit.validate.context import ValidateSpec
    from servekit.validate.runner import check_names
    name = opts["profile"]
    prof = load_profile(name, extra_dirs=opts["profiles_dirs"]) if name else None
    url = opts["url"] or (f"http://127.0.0.1:{prof.deploy.port}" if prof else None)
    if url is None:
        raise UsageError("--url is required without --profile", fix="e.g. --url http://127.0.0.1:8000")
    thinking: Any = prof.validate_defaults.thinking_kwargs if prof else None
    if opts["thinking_kwargs"]:
        thinking = parse_json_object(opts["thinking_kwargs"], "--thinking-kwargs")
    ladder = parse_numbers(opts["ladder"], int, "--ladder") if opts["ladder"] else (
        prof.validate_defaults.ladder if prof else [1, 2, 4, 8, 16])
    key, key_name = os.environ.get(opts["api_key_env"]), opts["api_key_env"]
    address = server_address(url, api_key=key, key_name=key_name)
    reference = (
        server_address(opts["reference_url"], api_key=key, flag="--reference-url",
                       key_name=key_name) if opts["reference_url"] else None
    )
    return ValidateSpec(
        base_url=address.base_url,
        model=opts["model"] or (prof.serve_args.served_model_name if prof else None),
        headers=address.headers,
        redactor=address.redactor.joined(reference.redactor) if reference else address.redactor,
        expected_max_model_len=prof.serve_args.max_model_len if prof else None,
        thinking_kwargs=thinking, thinking_expected=thinking is not None,
        ladder=tuple(int(n) for n in ladder),
        long_context_tokens=opts["long_context_tokens"] or (
            prof.validate_defaults.long_context_tokens if prof else None),
        log_file=opts["log_file"], reference_url=reference.base_url if reference else None,
        reference_headers=reference.headers if reference else None,
        only=check_names(opts["only"], "--only"), skip=check_names(opts["skip"], "--skip"),
        check_timeout_s=opts["timeout"],
    )  # fmt: skip
