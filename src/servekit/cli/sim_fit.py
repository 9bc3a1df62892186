"""`servekit sim fit` (shell): fit the simulator's step-time model to measured runs."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from servekit.bench.store import SUMMARY_FILE, read_summary
from servekit.cli._output import (
    emit_json,
    json_option,
    profiles_dir_option,
    stdout_console,
)
from servekit.errors import ConfigError, UsageError
from servekit.profiles import check_profile_output, load_profile
from servekit.report.tables import fit_table
from servekit.sim.build import build_engine, profile_step_params
from servekit.sim.fit import (
    MeasuredPoint,
    fit_rows,
    fit_step_params,
    fitted_profile,
    measured_points,
)


def _load_points(run_dirs: tuple[Path, ...]) -> list[MeasuredPoint]:
    points: list[MeasuredPoint] = []
    for run_dir in run_dirs:
        summary = read_summary(run_dir)  # bounded, regular files only, one-line errors
        points += measured_points(summary.as_json(), where=str(run_dir / SUMMARY_FILE))
    if not points:
        raise UsageError(
            "the runs hold no closed-loop points to fit",
            fix="pass runs of bench or sim run --concurrency (open-loop --rate points do not fit)",
        )
    return points


@click.command("fit")
@click.argument(
    "run_dirs",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "--profile", "profile_name", required=True, help="Profile whose deployment was measured."
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a profile (extends PROFILE) carrying the fitted coefficients.",
)
@click.option("--iterations", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@profiles_dir_option
@json_option
def fit_command(
    run_dirs: tuple[Path, ...],
    profile_name: str,
    output: Path | None,
    iterations: int,
    seed: int,
    profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Fit the step-time model to RUN_DIRs (bench or sim run) and report the error."""
    if output is not None:
        check_profile_output(output)  # before the work: a fit can take minutes
    profile = load_profile(profile_name, extra_dirs=profiles_dirs)
    points = _load_points(run_dirs)
    result = fit_step_params(
        lambda params: build_engine(profile, seed=seed, step_params=params),
        points,
        start=profile_step_params(profile),
        iterations=iterations,
        seed=seed,
    )
    rows = fit_rows(result)
    if output is not None:
        base = profile.simulator.model_dump(mode="json") if profile.simulator else {}
        source = f"servekit sim fit {' '.join(map(str, run_dirs))}"
        document = fitted_profile(profile.name, output.stem, base, result, source)
        try:
            output.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot write {output}: {exc.strerror or exc}", fix="choose another -o path"
            ) from None
    if as_json:
        emit_json(
            {"profile": profile.name, "loss": result.loss, "points": rows,
             "output": str(output) if output else None}
        )  # fmt: skip
        return
    title = f"sim fit {profile.name}: loss {result.loss:.4f}"
    stdout_console().print(fit_table(rows, title=title))
