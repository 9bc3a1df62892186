"""`servekit sim fit` (shell): calibrate the simulator from measured runs, check held-out ones."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from servekit.cli._output import emit_json, json_option, profiles_dir_option, stdout_console
from servekit.errors import ConfigError

_RUN_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


@click.command("fit")
@click.argument("run_dirs", nargs=-1, required=True, type=_RUN_DIR)
@click.option(
    "--profile", "profile_name", required=True, help="Profile whose deployment was measured."
)
@click.option(
    "--holdout", "holdout_dirs", multiple=True, type=_RUN_DIR,
    help="A run to predict but not fit (repeatable): its errors are held-out errors.",
)  # fmt: skip
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a profile (extends PROFILE) carrying the fitted simulator section.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the simulations.")
@click.option(
    "--realizations", type=click.IntRange(min=1), default=1, show_default=True,
    help="Simulate each point this many times (seeds SEED, SEED+1, ...) and average.",
)  # fmt: skip
@profiles_dir_option
@json_option
def fit_command(
    run_dirs: tuple[Path, ...],
    profile_name: str,
    holdout_dirs: tuple[Path, ...],
    output: Path | None,
    seed: int,
    realizations: int,
    profiles_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Fit the step-time model and acceptance to RUN_DIRs' engine steps; report the errors."""
    from servekit.bench.run_points import read_runs
    from servekit.profiles import check_profile_output, load_profile
    from servekit.report.tables import calibration_table, coefficients_table
    from servekit.sim.calibrate import calibrate
    from servekit.sim.fit import calibrated_profile, calibration_json
    from servekit.sim.fit_document import SIM_FIT_VERSION, SimFitDocument

    if output is not None:
        check_profile_output(output)  # before the work: a fit takes seconds to minutes
    profile = load_profile(profile_name, extra_dirs=profiles_dirs)
    training, holdout = read_runs(run_dirs, holdout_dirs)
    cal = calibrate(profile, training, holdout, seed=seed, realizations=realizations)
    doc = calibration_json(cal)
    if output is not None:
        base = profile.simulator.model_dump(mode="json") if profile.simulator else {}
        source = f"servekit sim fit {' '.join(map(str, run_dirs))}"
        document = calibrated_profile(profile.name, output.stem, base, cal, source)
        try:
            output.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot write {output}: {exc.strerror or exc}", fix="choose another -o path"
            ) from None
    if as_json:
        fitted = SimFitDocument.model_validate({
            "schema_version": SIM_FIT_VERSION, "profile": profile.name, **doc,
            "output": str(output) if output else None,
        })  # fmt: skip
        emit_json(fitted.as_json())
        return
    console = stdout_console()
    fit = cal.steps
    console.print(calibration_table(doc["points"], title=f"sim fit {profile.name}"))
    coefficients = doc["coefficients"] + ([doc["admission"]] if doc["admission"] else [])
    console.print(coefficients_table(
        coefficients,
        title=f"step coefficients: {fit.observations} intervals, rms {fit.rms_ms:.3f} ms, "
        f"{fit.outliers} dropped as pauses (admission_ms is fitted, not simulated)",
    ))  # fmt: skip
    if cal.acceptance is not None:
        a = cal.acceptance
        probs = ", ".join(f"{p:.3f}" for p in a.probabilities)
        console.print(
            f"acceptance at T={a.temperature:g} ({a.source}, {a.verifies} verifies): {probs}"
        )
