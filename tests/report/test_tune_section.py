"""The report of a tune run: its verdict leads with tune's winner, then tune's section with
the finalists, the Pareto plot and (when verified) predicted against measured."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from servekit.bench.store import read_tune
from servekit.cli.main import cli
from servekit.report.build import write_report
from servekit.report.tune_section import verification_table
from servekit.results.tune import TuneDocument, Verification

PROFILE = Path(__file__).resolve().parents[1] / "tune" / "data" / "tiny-tune.yaml"


def _tune(tmp_path: Path) -> Path:
    out = tmp_path / "tune"
    result = CliRunner().invoke(cli, ["tune", str(PROFILE), "--slo", "tpot_p50<=6ms",
                                      "--requests-per-point", "32", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def test_tune_report_leads_with_the_winner_and_draws_the_front(tmp_path: Path) -> None:
    """report --tune alone: the verdict's first line is tune's (the winner against the
    profile as it is, then the SLO and its load), the Tune section holds the finalists table
    and the Pareto plot, and the winner's launch command."""
    out = _tune(tmp_path)
    result = CliRunner().invoke(cli, ["report", "--tune", str(out), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "r" / "report.md").read_text()
    sections = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## Verdict", "## Tune"]
    verdict = markdown.split("## Tune")[0]
    headline = verdict.split("recommended:** ")[1].splitlines()[0]
    assert (
        "goodput per GPU against your profile as-is (predicted; measured: not verified)" in headline
    )
    assert "setting:** SLO tpot\\_p50&lt;=6ms: met up to" in verdict
    assert "finalists in the simulator" in markdown
    assert "vllm serve" in markdown
    assert (tmp_path / "r" / "tune_pareto.png").stat().st_size > 1000


def test_verification_table_says_held_out_and_at_least(tmp_path: Path) -> None:
    """A verified candidate's row: its round, whether the model had seen its points, both
    goodputs, the error, the bound verdict, and 'at least' when the SLO still held."""
    doc = read_tune(_tune(tmp_path))
    data = json.loads(json.dumps(doc.as_json()))
    finalist = doc.finalists[0].id
    prediction = next(c.prediction for c in doc.candidates if c.id == finalist)
    assert prediction is not None
    data["verification"] = [Verification(
        id=finalist, round=0, predicted=prediction, measured_load=4.0,
        measured_goodput_rps=prediction.goodput_rps / 1.1, measured_goodput_per_gpu=1.0,
        lower_bound=True, points=[], error=0.1, within_bound=True, fitted_on_own=False,
    ).as_json()]  # fmt: skip
    table = verification_table(TuneDocument.model_validate(data))
    (row,) = table.rows
    assert row[0] == finalist
    assert row[2] == "no (held out)"
    assert row[6].endswith("(at least)")
    assert row[7] == "+10.0%"
    assert row[8] == "yes"
    written = write_report([], tmp_path / "r2", tune=TuneDocument.model_validate(data))
    assert "verified on the engine" in Path(str(written.markdown)).read_text()
