"""`servekit demo` (shell): the deployment's journey on the built-in simulator."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._output import emit_json, json_option, make_out_dir


@click.command("demo")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out/demo"),
    show_default=True,
    help="Where runs, launch artifacts and the report go; a previous demo's output there "
    "is replaced (a non-empty directory the demo did not write is refused).",
)
@click.option("--quick", is_flag=True, help="Fewer levels and requests: under a minute.")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="FAULT",
    help="Inject a simulator fault, e.g. crash-at-concurrency=2.",
)
@json_option
def demo_command(out: Path, quick: bool, faults: tuple[str, ...], as_json: bool) -> None:
    """Plan, render, launch the simulator, validate, sweep, compare EAGLE3 on/off, report."""
    from servekit.demo import run_demo
    from servekit.sim.faults import parse_fault

    for fault in faults:
        parse_fault(fault, name="--fault")  # a bad fault is a usage error before anything starts

    def say(line: str) -> None:
        click.echo(line, err=as_json)

    result = run_demo(make_out_dir(out), quick=quick, faults=faults, say=say)
    if as_json:
        emit_json(result.as_json())
        return
    click.echo(
        "\nEAGLE3 on, temperature 0.7, simulated time (the deployment's figures in brackets; "
        "the calibration was fitted to the rows marked fitted, the others are predictions):"
    )
    for line in result.table:
        click.echo(f"  {line}")
    click.echo(f"\nrecommendation: {result.recommendation}")
    if result.speculative_config:
        schedule = result.speculative_config.as_json()["num_speculative_tokens_per_batch_size"]
        click.echo(
            f'  vLLM setting: add "num_speculative_tokens_per_batch_size": {schedule} '
            "to --speculative-config"
        )
    per = result.per_stream
    click.echo(
        f"highest concurrency at >= {per.target_tok_s:g} tok/s per stream: "
        f"{per.temperature_0_7} at temperature 0.7, {per.temperature_0_0} at 0.0 "
        "(deployment: 2 and 3)"
    )
    click.echo(f"report: {result.report}  ({result.seconds:.0f} s)")
