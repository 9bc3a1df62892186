"""The fidelity benchmark's core: joining, launch settings, incomplete entries, the bounds.

The bounds test plans the repo's real-startup corpus through the CLI (issue #15's Must
show); the rest pin the joining and settings logic on small hand-made corpora.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servekit.cli._fidelity import read_corpus, run_corpus
from servekit.errors import ConfigError
from servekit.plan.fidelity import (
    ConfigRecord,
    LaunchPlan,
    StartupRecord,
    Unplanned,
    compare_entry,
    distribution,
    join_config,
    launch_plan,
    parse_corpus,
)
from servekit.plan.fidelity_settings import engine_version, resolve_gpu, serve_sets
from servekit.units import GIB

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "real-startups"
LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}
FIGURES = {
    "model_loading_gib": 15.0,
    "available_kv_cache_gib": 50.0,
    "kv_cache_tokens": 400000,
    "max_concurrency": 48.8,
    "max_concurrency_at_tokens": 8192,
}


def startup(**fields: Any) -> StartupRecord:
    """A complete hand-made startup on one A800, updated by `fields`."""
    base: dict[str, Any] = {
        "id": "e1",
        "model": "org/Model-A",
        "vllm_version": "0.19.0",
        "quantization": "bfloat16",
        "gpu": "NVIDIA A800-SXM4-80GB",
        "tp": 1,
        "pp": 1,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 8192,
        "figures": dict(FIGURES),
    }
    return StartupRecord.model_validate({**base, **fields})


def configs(*records: dict[str, Any]) -> list[ConfigRecord]:
    """Config records from dicts."""
    return [ConfigRecord.model_validate(r) for r in records]


def plan_document(weights: float, kv: float, tokens: int, concurrency: float) -> dict[str, Any]:
    """The part of a `plan --json` document the comparison reads."""
    return {
        "per_gpu": {"weights_gib": weights, "kv_cache_gib": kv},
        "kv_cache_tokens": tokens,
        "max_concurrency_at_max_model_len": concurrency,
        "max_model_len": 8192,
    }


def test_corpus_meets_the_must_show_bounds() -> None:
    """Issue #15: weights within 2% on >= 90%, available KV within max(5%, 1 GiB) on >= 80%,
    KV tokens within 5% on >= 80% of the repo corpus's entries that print and can predict it."""
    results = run_corpus(read_corpus(CORPUS))
    stats = {s.figure: s for s in distribution(results)}
    report = {name: (s.within, s.compared, s.misses) for name, s in stats.items()}
    # how many entries each figure is compared on: an entry dropping to "incomplete" must show
    assert {n: stats[n].compared for n in ("weights", "available_kv", "kv_tokens")} == {
        "weights": 17, "available_kv": 16, "kv_tokens": 18}, report  # fmt: skip
    for name, share in (("weights", 0.9), ("available_kv", 0.8), ("kv_tokens", 0.8)):
        s = stats[name]
        assert (s.share_within or 0.0) >= share, report
    # the token bound also holds on the end-to-end predictions alone (without the entries
    # whose own budget is unknown and whose tokens are planned at the logged KV memory)
    compared = {"within", "outside"}
    own = [f for r in results for f in r.figures
           if f.figure == "kv_tokens" and f.basis == "plan" and f.status in compared]  # fmt: skip
    assert sum(f.status == "within" for f in own) >= 0.8 * len(own), [
        (f.status, f.error) for f in own
    ]


def test_join_by_corpus_model_string() -> None:
    """A startup joins the record whose `model` or `corpus_model_strings` equals its model."""
    records = configs(
        {"model": "org/Other", "config": {"model_type": "x"}},
        {"model": "org/Model", "corpus_model_strings": ["org/Model-A"], "config": LLAMA},
    )
    joined = join_config(startup(), records)
    assert not isinstance(joined, str)
    assert joined.record_model == "org/Model"
    assert joined.related_model is None
    assert joined.note is None
    assert joined.config["hidden_size"] == 4096


def test_join_falls_back_to_the_related_config_and_says_so() -> None:
    """Without its own config the related one stands in, and the note names both models."""
    records = configs(
        {"model": "org/Model-A", "related_config": {"model": "org/Base", "config": LLAMA}}
    )
    joined = join_config(startup(), records)
    assert not isinstance(joined, str)
    assert joined.related_model == "org/Base"
    assert joined.note == (
        "config: org/Model-A's own config.json is not in the corpus; "
        "planned from the related config of org/Base"
    )


def test_join_without_a_config_gives_the_reason() -> None:
    """No record, or a record with no facts, is a reason, not a guess."""
    assert join_config(startup(), []) == (
        "config: no configs.jsonl record names the model 'org/Model-A'"
    )
    assert join_config(startup(), configs({"model": "org/Model-A"})) == (
        "config: configs.jsonl has no config.json facts for org/Model-A"
    )


def test_launch_settings_in_vllm_spelling() -> None:
    """Every known launch setting becomes a `--set` in vLLM spelling, env vars by name."""
    entry = startup(
        tp=2,
        pp=2,
        dp=2,
        ep=True,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        block_size=16,
        kv_cache_dtype="fp8_e5m2",
        enforce_eager=False,
        env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "False (DEBUG env dump)",
             "--kv-cache-memory": "not set"},
        log_lines=["... Multiplying the GPU KV cache size by the dcp_world_size 4."],
    )  # fmt: skip
    sets, notes = serve_sets(entry, LLAMA)
    assert sets == [
        "tensor_parallel_size=2",
        "pipeline_parallel_size=2",
        "data_parallel_size=2",
        "enable_expert_parallel=true",
        "gpu_memory_utilization=0.9",
        "max_model_len=8192",
        "max_num_seqs=1024",
        "max_num_batched_tokens=8192",
        "block_size=16",
        "kv_cache_dtype=fp8_e5m2",
        "enforce_eager=false",
        "decode_context_parallel_size=4",
        "env.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=False",
    ]
    assert notes == []


def test_online_fp8_only_on_a_config_without_quantization() -> None:
    """'fp8' on a 16-bit config means vLLM's online fp8; on an fp8 checkpoint it does not."""
    sets, notes = serve_sets(startup(quantization="fp8"), LLAMA)
    assert "quantization=fp8" in sets
    assert "online fp8" in notes[0]
    fp8_config = {**LLAMA, "quantization_config": {"quant_method": "fp8"}}
    sets, _ = serve_sets(startup(quantization="fp8 (block FP8 checkpoint)"), fp8_config)
    assert not any(s.startswith("quantization=") for s in sets)


def test_fp8_checkpoint_on_a_stand_in_config_is_not_online_fp8() -> None:
    """An fp8 checkpoint planned from its base model's config, or one named as compressed
    tensors, has a scheme the corpus does not give: incomplete, not online fp8."""
    records = configs(
        {"model": "org/Model-A", "related_config": {"model": "org/Base", "config": LLAMA}}
    )
    launch = launch_plan(startup(quantization="fp8 dynamic"), records)
    assert isinstance(launch, LaunchPlan)
    assert "quantization=fp8" not in launch.sets
    assert launch.incomplete["weights"].startswith("quantization: 'fp8 dynamic'")
    own = configs({"model": "org/Model-A", "config": LLAMA})
    named = launch_plan(startup(quantization="fp8 dynamic (compressed-tensors)"), own)
    assert isinstance(named, LaunchPlan)
    assert "weights" in named.incomplete


def test_max_model_len_from_the_concurrency_line() -> None:
    """An unknown max_model_len is read from the log's 'Maximum concurrency for N tokens'."""
    sets, notes = serve_sets(startup(max_model_len=None), LLAMA)
    assert "max_model_len=8192" in sets
    assert notes[0] == "max_model_len 8192 from the log's concurrency line"


def test_engine_version_from_corpus_spellings() -> None:
    """Local builds and container tags are planned as their release."""
    assert engine_version("0.13.0+faa43dbf.nv26.01 (NVIDIA NGC vLLM container)") == "0.13.0"
    assert engine_version("0.10.1.x (inferred from source line numbers)") == "0.10.1"
    assert engine_version("v0.9") == "0.9.0"
    assert engine_version(None) is None


def test_gpu_through_the_catalog_aliases() -> None:
    """The text before the parenthesis is looked up as the catalog spells it; 'xN' counts."""
    choice = resolve_gpu("NVIDIA A800-SXM4-80GB x8 (read from the run name)")
    assert not isinstance(choice, str)
    assert (choice.name, choice.count, choice.note) == ("A800-80GB-SXM", 8, None)
    leading = resolve_gpu("2 x NVIDIA A800-SXM4-80GB")
    assert not isinstance(leading, str)
    assert (leading.name, leading.count) == ("A800-80GB-SXM", 2)
    assert resolve_gpu("NVIDIA Quantum 9000 (a made-up part)") == (
        "GPU: 'NVIDIA Quantum 9000' is not in the GPU catalog (servekit/hardware/gpus.yaml) "
        "under any spelling the entry gives"
    )
    assert resolve_gpu(None) == "GPU: the entry does not name its GPU"


def test_gpu_total_differs_from_the_catalog() -> None:
    """A logged total memory far from the catalog's is noted."""
    choice = resolve_gpu("NVIDIA A800-SXM4-80GB", reported_gib=70.0)
    assert not isinstance(choice, str)
    assert choice.note is not None
    assert choice.note.startswith("the log reports 70.00 GiB in total")


def test_unknown_utilization_checks_tokens_at_the_logged_kv_memory() -> None:
    """Without gpu_memory_utilization the KV memory is not compared, and tokens are planned
    with kv_cache_memory_bytes at the logged KV memory instead."""
    launch = launch_plan(
        startup(gpu_memory_utilization=None), configs({"model": "org/Model-A", "config": LLAMA})
    )
    assert isinstance(launch, LaunchPlan)
    assert launch.incomplete == {"available_kv": "gpu_memory_utilization: unknown"}
    assert launch.capacity_bytes == 50 * GIB
    assert launch.tokens_at_logged_kv
    plan = plan_document(15.0, 40.0, 300000, 36.6)
    at_logged = plan_document(15.0, 50.0, 401000, 48.9)
    result = compare_entry(launch.entry, launch, plan, at_logged)
    tokens = result.figure("kv_tokens")
    assert (tokens.status, tokens.predicted, tokens.basis) == ("within", 401000, "logged KV memory")
    assert result.figure("available_kv").status == "incomplete"


def test_quantized_launch_without_a_quantization_config_is_incomplete() -> None:
    """A quantized checkpoint planned from a 16-bit stand-in config cannot predict weights."""
    records = configs(
        {"model": "org/Model-A", "related_config": {"model": "org/Base", "config": LLAMA}}
    )
    launch = launch_plan(startup(quantization="compressed-tensors"), records)
    assert isinstance(launch, LaunchPlan)
    reason = "quantization: 'compressed-tensors' but the config has no quantization_config"
    assert launch.incomplete == {"weights": reason, "available_kv": reason}
    assert launch.capacity_bytes == 50 * GIB
    assert launch.tokens_at_logged_kv
    assert launch.notes[0].startswith("config: org/Model-A's own config.json is not")


def test_speculative_draft_blocks_every_figure() -> None:
    """A draft model the corpus does not describe changes weights and KV: none compared."""
    entry = startup(speculative="{'method': 'mtp', 'num_specul...' (truncated)")
    launch = launch_plan(entry, configs({"model": "org/Model-A", "config": LLAMA}))
    assert isinstance(launch, LaunchPlan)
    reason = "speculative decoding (mtp): the draft's weights and KV layers are unknown"
    assert dict(launch.incomplete) == dict.fromkeys(
        ("weights", "kv_tokens", "max_concurrency", "available_kv"), reason
    )
    assert not launch.tokens_at_logged_kv


def test_negative_kv_budget_is_not_a_capacity() -> None:
    """A negative logged KV budget is compared as memory but never used as a token budget."""
    figures = {"model_loading_gib": 66.0, "available_kv_cache_gib": -2.14, "kv_cache_tokens": 1}
    entry = startup(gpu_memory_utilization=None, figures=figures)
    launch = launch_plan(entry, configs({"model": "org/Model-A", "config": LLAMA}))
    assert isinstance(launch, LaunchPlan)
    assert launch.capacity_bytes is None
    assert not launch.tokens_at_logged_kv
    assert launch.incomplete["kv_tokens"] == "gpu_memory_utilization: unknown"


def test_compare_and_distribution() -> None:
    """Errors are (predicted - logged) / logged; bounds per figure; failures are misses."""
    records = configs({"model": "org/Model-A", "config": LLAMA})
    good = startup(id="good")
    bad = startup(id="bad")
    broken = startup(id="broken")
    results = [
        compare_entry(good, launch_plan(good, records), plan_document(15.2, 50.9, 407000, 49.5)),
        compare_entry(bad, launch_plan(bad, records), plan_document(16.0, 53.0, 430000, 52.0)),
        compare_entry(broken, launch_plan(broken, records), "profiles new: servekit: error: x"),
        compare_entry(startup(id="lost"), Unplanned("config: none", "incomplete"), None),
    ]
    assert results[0].tokens_at_logged_kv is not None  # the budget is known: a diagnostic
    assert results[0].tokens_at_logged_kv.status == "failed"  # no plan at the logged memory
    assert results[0].figure("kv_tokens").basis == "plan"
    weights = results[0].figure("weights")
    assert weights.status == "within"
    assert weights.error == pytest.approx(0.2 / 15)
    assert results[0].figure("available_kv").status == "within"  # 0.9 GiB < the 1 GiB floor
    assert results[1].figure("available_kv").status == "outside"  # 3 GiB > 5% of 50
    assert results[2].figure("kv_tokens").status == "failed"
    assert results[3].figure("weights").status == "incomplete"
    stats = {s.figure: s for s in distribution(results)}
    assert (stats["weights"].within, stats["weights"].compared) == (1, 3)
    assert stats["weights"].misses == ("bad", "broken")
    assert stats["weights"].incomplete == 1
    assert stats["weights"].failed == 1
    assert stats["weights"].median_abs_error == pytest.approx((0.2 / 15 + 1 / 15) / 2)
    assert stats["max_concurrency"].within is None
    assert stats["kv_tokens"].max_abs_error == pytest.approx(30000 / 400000)


def test_parse_corpus_names_a_bad_line(tmp_path: Path) -> None:
    """A line that is not a record fails with its file and line number."""
    line = json.dumps({"id": "e1", "model": "m"})
    corpus = parse_corpus(f"{line}\n\n", json.dumps({"model": "m"}))
    assert corpus.startups[0].id == "e1"
    assert corpus.configs[0].model == "m"
    with pytest.raises(ConfigError, match=r"startups\.jsonl line 2 is not a corpus record"):
        parse_corpus(f"{line}\n{{not json\n", "")


def test_run_corpus_lists_unplannable_entries(tmp_path: Path) -> None:
    """An entry on a GPU the catalog lacks fails every figure it prints, with the reason;
    one whose model has no config is incomplete."""
    entry = {"id": "e1", "model": "org/Model-A", "gpu": "NVIDIA Quantum 9000", "figures": FIGURES}
    lost = {**entry, "id": "e2", "model": "org/Unknown"}
    lines = "".join(json.dumps(e) + "\n" for e in (entry, lost))
    (tmp_path / "startups.jsonl").write_text(lines, encoding="utf-8")
    record = {"model": "org/Model-A", "config": LLAMA}
    (tmp_path / "configs.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    failed, incomplete = run_corpus(read_corpus(tmp_path))
    assert failed.problem is not None
    assert failed.problem.startswith("GPU: 'NVIDIA Quantum 9000'")
    assert {f.status for f in failed.figures} == {"failed"}
    assert incomplete.problem == "config: no configs.jsonl record names the model 'org/Unknown'"
    assert {f.status for f in incomplete.figures} == {"incomplete"}
