"""The must-show of issue #19 in simulation: tune the built-in M3 for 60 tok/s per stream.

MiniMax-M3-MXFP8 on 8x A800 with the deployment's workload (1024 in, 128 out, temperature
0.7, a closed loop) and the whole default space (4,608 candidates): speculation is needed to
meet the SLO at all and costs throughput above a batch size, so tune proposes vLLM's
per-batch-size schedule; it states the winning max_num_seqs and the KV headroom at 128K.
The search's wall time is measured in benchmarks/bench_tune.py, not asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli
from servekit.profiles import load_profile

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], str, Path]:
    """One tune of the whole default space (about half a minute)."""
    out = tmp_path_factory.mktemp("m3") / "tune"
    result = CliRunner().invoke(cli, [
        "tune", "minimax-m3-mxfp8-8xa800", "--slo", "per_stream_p50>=60tok/s",
        "--temperature", "0.7", "--out", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads((out / "tune.json").read_text()), result.output, out


def test_every_candidate_is_planned_and_the_infeasible_carry_the_reason(tuned: tuple) -> None:
    """4,608 candidates; those that cannot run say why (TP below 8 cannot hold the weights;
    chunked prefill off cannot hold a 128K prompt in the batch budget)."""
    doc, _, _ = tuned
    assert doc["candidates_total"] == 4608
    infeasible = [c for c in doc["candidates"] if not c["feasible"]]
    assert len(infeasible) == doc["candidates_total"] - doc["feasible"] > 0
    assert all(c["reason"] for c in infeasible)
    tp4 = [c for c in infeasible if c["settings"]["tensor_parallel_size"] == 4
           and c["settings"]["enable_chunked_prefill"]]  # fmt: skip
    assert tp4
    assert all(c["reason"].startswith("the weights take") for c in tp4)
    unchunked = [c for c in infeasible if c["settings"]["enable_chunked_prefill"] is False
                 and c["settings"]["max_model_len"] == 131072]  # fmt: skip
    assert all("chunked prefill off" in c["reason"] for c in unchunked)
    risky = [c for c in doc["candidates"] if c["oom_risk"]]
    assert risky
    assert all("OOM risk" in c["oom_risk"] for c in risky)


def test_speculation_on_at_low_concurrency_off_above_with_vllms_setting(tuned: tuple) -> None:
    """The winner speculates up to a batch size and not above, as vLLM's
    num_speculative_tokens_per_batch_size; without speculation the SLO is never met."""
    doc, output, _ = tuned
    winner = doc["winner"]
    assert winner["chosen_by"] == "predicted"
    assert "num_speculative_tokens_per_batch_size" in winner["speculation"]
    ranking = {c["id"]: c for c in doc["candidates"]}
    settings = ranking[winner["id"]]["settings"]
    assert "<=" in settings["speculative"]
    k, upto = settings["speculative"].removeprefix("k").split("<=")
    assert int(k) >= 1
    assert 1 <= int(upto) < winner["max_num_seqs"]
    tuned_profile = load_profile(str(Path(tuned[2]) / winner["profile_file"]))
    assert tuned_profile.speculative is not None
    schedule = tuned_profile.speculative.config.num_speculative_tokens_per_batch_size
    assert schedule == [(1, int(upto), int(k)), (int(upto) + 1, winner["max_num_seqs"], 0)]
    offs = [c for c in doc["candidates"]
            if c["feasible"] and c["settings"]["speculative"] == "off"]  # fmt: skip
    assert offs
    assert all(c["prediction"] is None or c["prediction"]["load"] is None for c in offs)
    assert "num_speculative_tokens_per_batch_size" in output


def test_the_slo_load_max_num_seqs_and_kv_headroom_are_stated(tuned: tuple) -> None:
    """The seed's 60 tok/s per stream holds up to concurrency 2 at 0.7; the verdict states
    the winning max_num_seqs and the KV cache as requests of 131,072 tokens, after its first
    line, the winner against the profile as it is."""
    doc, output, _ = tuned
    winner = doc["winner"]
    assert winner["load"] == 2
    assert winner["kv"]["max_model_len"] == 131072
    assert winner["kv"]["requests_at_max_model_len"] >= 1
    assert f"max_num_seqs {winner['max_num_seqs']}" in output
    assert "requests of max_model_len 131,072" in output
    assert doc["verdict"][1].startswith("SLO per_stream_p50>=60tok/s: met up to 2")
    as_is = doc["as_is"]  # the profile's own settings are in the default space
    assert as_is["in_space"]
    assert as_is["predicted"]["requests"] == 256
    assert as_is["gain_predicted"] > 0
    assert doc["verdict"][0] == (
        f"{as_is['gain_predicted']:+.1%} goodput per GPU against your profile as-is "
        "(predicted; measured: not verified)"
    )
    assert doc["pareto"]
    assert (Path(tuned[2]) / "report" / "report.html").is_file()
