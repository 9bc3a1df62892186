"""In-process CLI tests: output, JSON contract, exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli

DATA = Path(__file__).resolve().parents[1] / "plan" / "data"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_plan_json_is_pure_json() -> None:
    """plan --json prints one JSON document on stdout and nothing else."""
    code, out, err = run("plan", "minimax-m3-mxfp8-8xa800", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kv_bytes_per_token"] == 45_824
    assert doc["per_gpu"]["weights_gib"] == pytest.approx(58.5, rel=0.10)
    assert doc["per_gpu"]["cuda_graphs_gib"] == pytest.approx(4.1, rel=0.30)
    assert doc["kv_cache_tokens"] > 131_072
    assert doc["max_concurrency_at_max_model_len"] > 1


def test_plan_human_output() -> None:
    """plan prints the budget, the KV derivation and the warnings."""
    code, out, _ = run("plan", "minimax-m3-mxfp8-8xa800")
    assert code == 0
    for text in ("KV cache", "indexer key cache", "14,592", "weight-only through Marlin"):
        assert text in out


def test_plan_from_log_side_by_side() -> None:
    """--from-log shows planned against logged figures."""
    code, out, err = run(
        "plan", "minimax-m3-mxfp8-8xa800", "--from-log", str(DATA / "m3_a800_tp8.log"), "--json"
    )
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["from_log"]["figures"]}
    assert rows["weights"]["actual"] == pytest.approx(58.5)
    assert rows["KV cache"]["actual"] == pytest.approx(10.2)
    assert rows["KV cache tokens"]["actual"] == 241_664


def test_plan_from_log_without_figures(tmp_path: Path) -> None:
    """A log with no vLLM figures is an error, not an empty comparison."""
    log = tmp_path / "empty.log"
    log.write_text("hello\n", encoding="utf-8")
    code, _, err = run("plan", "llama-3.1-70b-4xh100", "--from-log", str(log))
    assert code == 1
    assert "holds no vLLM startup figures" in err


def test_misfit_exits_1_with_largest_length() -> None:
    """A max_model_len that does not fit exits 1 naming the largest one that does."""
    code, _, err = run("plan", "llama-3.1-70b-4xh100", "--set", "max_model_len=2000000")
    assert code == 1
    assert err.startswith("servekit: error: max_model_len 2000000 needs")
    assert "lower it with --set max_model_len=" in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_profile_exit_1_lists_available() -> None:
    """An unknown profile is one line on stderr listing the available profiles, exit 1."""
    code, out, err = run("plan", "nope")
    assert code == 1
    assert out == ""
    assert "unknown profile 'nope'" in err
    assert "minimax-m3-mxfp8-8xa800" in err


def test_bad_utilization_exit_1() -> None:
    """A utilization outside (0, 1] is one clear line and exit 1."""
    code, _, err = run("plan", "llama-3.1-70b-4xh100", "--set", "gpu_memory_utilization=1.2")
    assert code == 1
    assert "gpu_memory_utilization 1.2 is outside (0, 1]" in err


def test_tp_not_dividing_heads_exit_1() -> None:
    """A TP that does not divide the attention heads is one clear line and exit 1."""
    code, _, err = run(
        "plan",
        "llama-3.1-70b-4xh100",
        "--set",
        "tensor_parallel_size=3",
        "--set",
        "hardware.gpus_per_node=3",
    )
    assert code == 1
    assert "tensor_parallel_size 3 does not divide the 64 attention heads" in err


def test_usage_errors_exit_2() -> None:
    """Unknown targets and malformed --set are usage errors (exit 2)."""
    assert run("render", "llama-3.1-70b-4xh100", "--target", "helm")[0] == 2
    code, _, err = run("plan", "llama-3.1-70b-4xh100", "--set", "oops")
    assert code == 2
    assert "is not key=value" in err


def test_missing_shard_exit_1(tmp_path: Path) -> None:
    """A model directory whose index names a missing shard fails naming the shard."""
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "vocab_size": 128,
                "intermediate_size": 128,
            }
        ),
        encoding="utf-8",
    )
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}), encoding="utf-8"
    )
    code, _, err = run("plan", "llama-3.1-70b-4xh100", "--model-dir", str(tmp_path))
    assert code == 1
    assert "model-00001-of-00002.safetensors" in err


def test_profiles_list_and_show_json() -> None:
    """profiles list/show --json give the built-ins and a merged profile."""
    code, out, _ = run("profiles", "list", "--json")
    assert code == 0
    names = {p["name"] for p in json.loads(out)["profiles"]}
    assert {"minimax-m3-mxfp8-8xa800", "deepseek-v3-8xh200"} <= names
    code, out, _ = run("profiles", "show", "minimax-m3-mxfp8-8xa800-no-eagle3", "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["schema_version"] == 1
    assert "speculative" not in shown["profile"]
    assert shown["profile"]["serve_args"]["max_model_len"] == 131072


def test_render_vllm_env_line_and_json(tmp_path: Path) -> None:
    """render --target vllm carries the env line; -o writes the file; --json has the argv."""
    code, out, _ = run("render", "minimax-m3-mxfp8-8xa800", "--target", "vllm")
    assert code == 0
    assert out.splitlines()[0].startswith("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0")
    target = tmp_path / "launch.sh"
    code, out, _ = run(
        "render", "minimax-m3-mxfp8-8xa800", "--target", "script", "-o", str(target), "--json"
    )
    assert code == 0
    assert target.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash")
    assert json.loads(out)["argv"][:3] == ["vllm", "serve", "/models/MiniMax-M3-MXFP8"]


def test_version() -> None:
    """--version prints the package version."""
    code, out, _ = run("--version")
    assert code == 0
    assert out.startswith("servekit, version ")


def test_plan_from_log_shows_failures() -> None:
    """Failure signatures in the log are reported with their line numbers."""
    log = str(DATA / "crash_illegal_memory_access.log")
    code, out, _ = run("plan", "minimax-m3-mxfp8-8xa800", "--from-log", log, "--json")
    assert code == 0
    kinds = {f["kind"] for f in json.loads(out)["from_log"]["failures"]}
    assert {"illegal_memory_access", "engine_fatal", "worker_died"} <= kinds
    code, out, _ = run("plan", "minimax-m3-mxfp8-8xa800", "--from-log", log)
    assert "illegal_memory_access" in out


def test_render_to_unwritable_path_is_one_line(tmp_path: Path) -> None:
    """-o into a missing directory is a one-line error, exit 1."""
    code, _, err = run("render", "llama-3.1-70b-4xh100", "-o", str(tmp_path / "no" / "x.sh"))
    assert code == 1
    assert err.startswith("servekit: error: cannot write")


def test_profiles_list_survives_a_broken_user_file(tmp_path: Path) -> None:
    """One invalid user profile is listed as invalid; the others are still listed."""
    (tmp_path / "broken.yaml").write_text("name: broken\nserve_args: [\n", encoding="utf-8")
    code, out, _ = run("profiles", "list", "--profiles-dir", str(tmp_path), "--json")
    assert code == 0
    rows = {p["name"]: p for p in json.loads(out)["profiles"]}
    assert "invalid YAML" in rows["broken"]["error"]
    assert "minimax-m3-mxfp8-8xa800" in rows


def test_plan_reads_a_real_checkpoint(tmp_path: Path) -> None:
    """--model-dir takes the facts from config.json and the exact bytes from the shards."""
    import numpy as np
    from safetensors.numpy import save_file

    config = {
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "vocab_size": 512,
        "intermediate_size": 512,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tensors = {
        "model.embed_tokens.weight": np.zeros((512, 256), dtype=np.float16),
        "model.layers.0.self_attn.q_proj.weight": np.zeros((256, 256), dtype=np.float16),
        "model.layers.0.mlp.down_proj.weight": np.zeros((256, 512), dtype=np.float16),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    code, out, err = run("plan", "llama-3.1-70b-4xh100", "--model-dir", str(tmp_path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["checkpoint"]["total_bytes"] == sum(t.nbytes for t in tensors.values())
    assert doc["checkpoint"]["group_bytes"]["embeddings"] == 512 * 256 * 2
    # 2 layers x 2 x (8 KV heads / TP4 = 2) x 32 head_dim x 2 B
    assert doc["kv_bytes_per_token"] == 2 * 2 * 2 * 32 * 2
    code, out, _ = run("plan", "llama-3.1-70b-4xh100", "--model-dir", str(tmp_path))
    assert "checkpoint" in out
