"""`servekit compare RUN_A RUN_B` (shell): per-load deltas, crossover, speculation advice."""

from __future__ import annotations

from pathlib import Path

import click

from servekit.cli._output import emit_json, json_option, stdout_console
from servekit.cli._values import FiniteFloat
from servekit.errors import ServekitError


@click.command("compare")
@click.argument("run_a", type=click.Path(exists=True, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, path_type=Path))
@click.option("--per-stream-target", type=FiniteFloat(min=0, min_open=True),
              help="Per-stream tok/s target: highest concurrency meeting it.")  # fmt: skip
@json_option
def compare_command(
    run_a: Path, run_b: Path, per_stream_target: float | None, as_json: bool
) -> None:
    """Compare two runs (EAGLE3 on against off, say): deltas per load, crossover, advice."""
    from servekit.analyze.compare import compare_runs, speculation_facts
    from servekit.bench.store import read_summary
    from servekit.report.build import summary_profile
    from servekit.report.tables import compare_table
    from servekit.results.compare import ComparedRuns

    a, b = read_summary(run_a), read_summary(run_b)
    name, max_batch, k = speculation_facts([summary_profile(a), summary_profile(b)])
    doc = compare_runs(
        a,
        b,
        per_stream_target=per_stream_target,
        spec_name=name,
        max_batch=max_batch,
        spec_tokens=k,
    )
    doc = doc.model_copy(update={"runs": ComparedRuns(A=str(run_a), B=str(run_b))})
    if not doc.points:
        raise ServekitError(f"{run_a} and {run_b} share no load (concurrency or rate) to compare",
                            fix="compare runs of the same sweep")  # fmt: skip
    if as_json:
        emit_json(doc.as_json())
        return
    console = stdout_console()
    console.print(compare_table(doc.points, title=f"B = {run_b}  vs  A = {run_a}"))
    if doc.crossover:
        console.print(f"crossover: {doc.crossover}")
    if spec := doc.speculation:
        console.print(f"[bold]{spec.recommendation}[/bold]", highlight=False)
        if spec.speculative_config:
            setting = spec.speculative_config.as_json()
            console.print(f"vLLM setting: {setting}", highlight=False, markup=False)
    if target := doc.per_stream_target:
        console.print(f"highest concurrency at >= {target.tok_s:g} tok/s per stream: "
                      f"A {target.A}, B {target.B}")  # fmt: skip
