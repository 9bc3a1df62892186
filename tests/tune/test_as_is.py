"""tune says what it wins (issue #29 item 7): the verdict's first line sets the winner against
the profile as the user gave it, predicted by the same calibration at the full request count
and measured when verification measured both; the same figures are tune.json's `as_is`; the
tables tune prints stay legible at 80 columns.
"""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console
from tune_helpers import M3

from servekit.cli.main import cli
from servekit.profiles import load_profile
from servekit.report.tune_view import print_tune, tune_tables
from servekit.results.tune import AsIs, Prediction, TuneDocument, Verification, load_tune
from servekit.tune.baseline import as_is_line
from servekit.tune.search import changed
from servekit.tune.space import Speculation, as_is_settings, default_space, overrides

TINY = Path(__file__).parent / "data" / "tiny-tune.yaml"
UNIT = "concurrent requests"


def _prediction(goodput_per_gpu: float, load: float | None = 4.0) -> Prediction:
    return Prediction(load=load, goodput_rps=goodput_per_gpu, goodput_per_gpu=goodput_per_gpu,
                      requests=256, capped=False, model_round=0)  # fmt: skip


def _as_is(**changes: Any) -> AsIs:
    """The profile as it is at 10 req/s per GPU, the winner `cwin` at 12.5, unmeasured."""
    fields: dict[str, Any] = {
        "id": "casis", "label": "seqs=8", "in_space": True, "feasible": True, "reason": None,
        "predicted": _prediction(10.0), "measured_load": None, "measured_goodput_per_gpu": None,
        "winner_id": "cwin", "winner_predicted_goodput_per_gpu": 12.5,
        "winner_measured_goodput_per_gpu": None, "gain_predicted": 0.25, "gain_measured": None,
    }  # fmt: skip
    return AsIs(**{**fields, **changes})


def test_the_winner_better_predicted_and_measured() -> None:
    """The gain in goodput per GPU, predicted; measured when both were measured, else said
    to be not verified."""
    assert as_is_line(_as_is(), UNIT) == (
        "+25.0% goodput per GPU against your profile as-is (predicted; measured: not verified)"
    )
    measured = _as_is(measured_load=4.0, measured_goodput_per_gpu=10.0,
                      winner_measured_goodput_per_gpu=11.8, gain_measured=0.18)  # fmt: skip
    assert as_is_line(measured, UNIT) == (
        "+25.0% goodput per GPU against your profile as-is (predicted; measured +18.0%)"
    )
    only_mine = _as_is(measured_load=4.0, measured_goodput_per_gpu=10.0)
    assert as_is_line(only_mine, UNIT).endswith("(predicted; measured: the winner not verified)")


def test_the_winner_equal_is_a_tie_and_worse_is_said() -> None:
    """The same goodput per GPU is +0.0%, a tie; a winner the profile as it is beats (it can
    be, outside the space or by measurement) says so."""
    equal = _as_is(winner_predicted_goodput_per_gpu=10.0, gain_predicted=0.0)
    assert as_is_line(equal, UNIT) == (
        "+0.0% goodput per GPU against your profile as-is (predicted; measured: not verified): "
        "within 2%, which the search counts as a tie"
    )
    worse = _as_is(measured_load=4.0, measured_goodput_per_gpu=10.0,
                   winner_measured_goodput_per_gpu=9.0, gain_measured=-0.1)  # fmt: skip
    assert as_is_line(worse, UNIT) == (
        "+25.0% goodput per GPU against your profile as-is (predicted; measured -10.0%): "
        "your profile as-is measured better"
    )


def test_the_profile_as_is_meets_the_slo_at_no_load() -> None:
    """No gain to state against zero: the winner's own goodput per GPU instead."""
    failing = _as_is(predicted=_prediction(0.0, load=None), gain_predicted=None)
    assert as_is_line(failing, UNIT) == (
        "your profile as-is meets the SLO at no load tried; the winner reaches "
        "12.5 req/s per GPU (predicted; measured: not verified)"
    )
    measured = failing.model_copy(
        update={"measured_goodput_per_gpu": 0.0, "winner_measured_goodput_per_gpu": 11.0}
    )
    assert as_is_line(measured, UNIT).endswith(
        "(predicted; measured: your profile as-is met it at no load measured, the winner "
        "11 req/s per GPU)"
    )


def test_the_winner_is_the_profile_as_is() -> None:
    """The search found nothing better than the profile as it is."""
    same = _as_is(winner_id="casis", winner_predicted_goodput_per_gpu=10.0, gain_predicted=0.0)
    assert as_is_line(same, UNIT) == (
        "your profile as-is is already the best found: 10 req/s per GPU "
        "(predicted; measured: not verified)"
    )
    measured = same.model_copy(update={"measured_goodput_per_gpu": 9.5})
    assert as_is_line(measured, UNIT).endswith("(predicted; measured 9.5 req/s per GPU)")


def test_zero_goodput_and_a_profile_that_cannot_run() -> None:
    """Nothing meets the SLO; only the profile as it is does; it cannot run at all."""
    none = _as_is(predicted=_prediction(0.0, load=None), winner_predicted_goodput_per_gpu=0.0,
                  gain_predicted=None)  # fmt: skip
    assert as_is_line(none, UNIT) == (
        "no candidate meets the SLO at any load tried, nor does your profile as-is"
    )
    only_mine = _as_is(winner_predicted_goodput_per_gpu=0.0, gain_predicted=None)
    assert as_is_line(only_mine, UNIT) == (
        "your profile as-is meets the SLO up to 4 concurrent requests, 10 req/s per GPU "
        "(predicted); no candidate of the space meets it at any load tried"
    )
    refused = _as_is(feasible=False, reason="max_num_batched_tokens 4 is below max_num_seqs 8",
                     predicted=None, gain_predicted=None)  # fmt: skip
    assert as_is_line(refused, UNIT) == (
        "the winner reaches 12.5 req/s per GPU (predicted; measured: not verified); your "
        "profile as-is cannot run: max_num_batched_tokens 4 is below max_num_seqs 8"
    )


@pytest.mark.parametrize("name", [str(TINY), M3])
def test_the_profile_as_is_is_its_own_settings_and_in_the_default_space(name: str) -> None:
    """Tune's own count of changed settings is 0 for it, and the default space holds it (so
    the search ranks it like any candidate)."""
    profile = load_profile(name)
    flag = profile.env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1") != "0"
    settings = as_is_settings(profile, estimate_cudagraphs=flag, needed_len=320)
    assert changed(profile, settings) == 0
    space = default_space(profile, graph_flag=True, reuse=False, needed_len=320)
    assert settings in set(space.candidates())
    if name == M3:
        assert overrides(profile, settings) == {}


def test_a_per_batch_size_schedule_is_the_profile_as_is() -> None:
    """A profile's own num_speculative_tokens_per_batch_size is kept, not flattened."""
    profile = load_profile(str(TINY))
    assert profile.speculative is not None
    config = profile.speculative.config.model_copy(
        update={"num_speculative_tokens_per_batch_size": [(1, 4, 3), (5, 8, 0)]}
    )
    scheduled = profile.model_copy(
        update={"speculative": profile.speculative.model_copy(update={"config": config})}
    )
    settings = as_is_settings(scheduled, estimate_cudagraphs=True, needed_len=320)
    assert settings.speculation == Speculation(3, ((1, 4, 3), (5, 8, 0)))
    assert changed(scheduled, settings) == 0


SPACE = """\
max_num_seqs: [4, 8, 16]
max_num_batched_tokens: [1024, 2048, 4096]
speculative: ['off', 3]
gpu_memory_utilization: [0.9]
estimate_cudagraphs: [true]
enable_chunked_prefill: [true, false]
max_model_len: [2048]
"""


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[TuneDocument, str]:
    """tiny-tune in simulation over 36 candidates around its own settings (about 1 s): seven
    finalists that differ in four settings, two with notes, as the whole default space of
    768 gives."""
    tmp = tmp_path_factory.mktemp("as-is")
    (tmp / "space.yaml").write_text(SPACE)
    result = CliRunner().invoke(cli, [
        "tune", str(TINY), "--slo", "tpot_p50<=6ms", "--requests-per-point", "32",
        "--space", str(tmp / "space.yaml"), "--out", str(tmp / "tune"),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    return load_tune(json.loads((tmp / "tune" / "tune.json").read_text())), result.stdout


def test_a_sim_tune_prints_the_comparison_first(tuned: tuple[TuneDocument, str]) -> None:
    """The first line printed is the comparison, as tune.json's verdict and `as_is` state it:
    the winner's and the profile's predictions by one calibration at the full request count."""
    doc, stdout = tuned
    first = stdout.splitlines()[0]
    assert first == doc.verdict[0]
    assert re.fullmatch(
        r"\+\d+\.\d% goodput per GPU against your profile as-is "
        r"\(predicted; measured: not verified\)",
        first,
    ), first
    a = doc.as_is
    assert a is not None
    assert doc.winner is not None
    assert a.winner_id == doc.winner.id != a.id
    assert a.predicted is not None
    assert a.winner_predicted_goodput_per_gpu == doc.winner.goodput_per_gpu
    winner = next(c.prediction for c in doc.candidates if c.id == doc.winner.id)
    assert winner is not None
    assert (a.predicted.requests, a.predicted.model_round) == (winner.requests, 0) == (32, 0)
    assert a.gain_predicted == round(winner.goodput_per_gpu / a.predicted.goodput_per_gpu - 1, 4)
    assert first.startswith(f"{a.gain_predicted:+.1%} ")
    assert a.measured_goodput_per_gpu is None
    assert a.gain_measured is None


def _verified(doc: TuneDocument) -> TuneDocument:
    """The run with three verifications: the winner (still meeting the SLO at its last load),
    the profile as it is, and a finalist whose engine failed."""
    assert doc.as_is is not None
    assert doc.as_is.predicted is not None
    failed = {"status": "failed", "detail": "the engine did not start"}
    rows = []
    for ident, lower, more in (
        (doc.finalists[0].id, True, {}),
        (doc.as_is.id, False, {}),
        (doc.finalists[1].id, False, failed),
    ):
        p = next((c.prediction for c in doc.candidates if c.id == ident), doc.as_is.predicted)
        assert p is not None
        rows.append(Verification(
            id=ident, round=0, predicted=p, measured_load=12.3456, measured_goodput_rps=0.123456,
            measured_goodput_per_gpu=0.123456, lower_bound=lower, points=[], error=-0.1234,
            within_bound=False, fitted_on_own=False, **more,
        ))  # fmt: skip
    return doc.model_copy(update={"verification": rows})


def test_the_tables_fit_80_columns_without_cutting_a_column(
    tuned: tuple[TuneDocument, str],
) -> None:
    """At 80 columns every line of the finalists and verification tables fits, no cell is
    cut to an ellipsis, every id is whole and every differing setting shows."""
    doc = _verified(tuned[0])
    out = StringIO()
    console = Console(width=80, file=out, color_system=None)
    for table in tune_tables(doc):
        console.print(table)
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "…" not in text, text
    for f in doc.finalists:
        assert f.id in text
    assert "seqs=16" in text
    assert "spec=k3<=2" in text
    assert doc.as_is is not None
    assert f"{doc.as_is.id} " in text  # its verification row says whose it is
    assert "(as-is)" in text
    assert "0.1235 at 12.35" in text
    assert "(at least)" in text
    assert "failed" in text
    last = doc.finalists[-1]  # the profile as it is, when a finalist, is named in its row
    mine = doc.model_copy(update={"as_is": doc.as_is.model_copy(update={"id": last.id})})
    out = StringIO()
    Console(width=80, file=out).print(tune_tables(mine)[0])
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80
    assert "(your profile as-is)" in out.getvalue()
    assert "…" not in out.getvalue()
    printed = StringIO()  # tune's own console soft-wraps the verdict, never the tables
    print_tune(doc, Path("out"), Console(width=80, file=printed, soft_wrap=True, highlight=False))
    table_lines = [line for line in printed.getvalue().splitlines() if line[:1] in "┏┃┡│└"]
    assert table_lines
    assert max(len(line) for line in table_lines) <= 80


def test_a_tune_json_without_as_is_still_reads_and_prints(
    tuned: tuple[TuneDocument, str],
) -> None:
    """A tune.json written before `as_is` existed reads (version 1: the key is optional) and
    its tables print."""
    data = json.loads(json.dumps(tuned[0].as_json()))
    del data["as_is"]
    data["verdict"] = data["verdict"][1:]
    old = load_tune(data)
    assert old.as_is is None
    assert "as_is" not in old.as_json()
    assert tune_tables(old)
