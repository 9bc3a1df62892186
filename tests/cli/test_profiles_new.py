"""`servekit profiles new` and `plan --model-config`: a validated profile from a bare
config.json with vLLM's defaults, round-tripping through `profiles show`, and one-line
errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from servekit.cli.main import cli
from servekit.errors import ModelDirError
from servekit.hardware import lookup_gpu
from servekit.plan.new_profile import batch_defaults, derived_max_model_len

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks/corpus/real-startups/configs.jsonl"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _config(model: str) -> dict[str, Any]:
    for line in CONFIGS.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["model"] == model:
            return dict(entry["config"])
    raise AssertionError(model)


@pytest.fixture
def llama(tmp_path: Path) -> Path:
    """Llama-3.1-8B-Instruct's config.json, as published."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config("meta-llama/Llama-3.1-8B-Instruct")), encoding="utf-8")
    return path


def _one_line_error(code: int, err: str) -> str:
    assert code in {1, 2}, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("servekit: error: ")
    return lines[0]


def test_new_writes_a_profile_that_round_trips_and_plans(llama: Path, tmp_path: Path) -> None:
    """-o writes a validated profile; profiles show prints it back unchanged and plan loads it."""
    out = tmp_path / "llama8b.yaml"
    code, _, err = run(
        "profiles", "new", "llama8b", "--model-config", str(llama), "--gpu", "h100",
        "--gpus", "1", "--engine-version", "0.19.0", "--set", "max_model_len=8192",
        "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    written = yaml.safe_load(out.read_text(encoding="utf-8"))
    code, shown, err = run("profiles", "show", "llama8b", "--profiles-dir", str(tmp_path))
    assert code == 0, err
    assert yaml.safe_load(shown) == written
    assert written["model"]["architecture"]["num_kv_heads"] == 8
    assert any("max_num_seqs 1024: vLLM default" in s for s in written["model"]["sources"])
    code, doc, err = run("plan", "llama8b", "--profiles-dir", str(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(doc)["kv_bytes_per_token"] == 131_072


def test_new_without_output_prints_the_yaml(llama: Path) -> None:
    """Without -o the profile goes to stdout, as profiles show prints one."""
    code, out, err = run(
        "profiles", "new", "llama8b", "--model-config", str(llama), "--gpu", "l40s", "--gpus", "1"
    )
    assert code == 0, err
    document = yaml.safe_load(out)
    args = document["serve_args"]
    # vLLM 0.32 on a 45 GiB card: 256 sequences, 2048 tokens, 0.92 utilization; Llama 3.1's
    # llama3 RoPE already scales max_position_embeddings (131072).
    assert (args["max_num_seqs"], args["max_num_batched_tokens"]) == (256, 2048)
    assert args["gpu_memory_utilization"] == 0.92
    assert args["max_model_len"] == 131_072
    assert document["engine"] == {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0",
                                  "patches": []}  # fmt: skip


def test_plan_takes_a_model_config_directly(llama: Path, tmp_path: Path) -> None:
    """plan --model-config --gpu --gpus plans the same as the profile profiles new writes."""
    common = ["--model-config", str(llama), "--gpu", "H100", "--gpus", "2",
              "--set", "max_model_len=8192"]  # fmt: skip
    code, direct, err = run("plan", *common, "--json")
    assert code == 0, err
    code, _, err = run("profiles", "new", "m", *common, "-o", str(tmp_path / "m.yaml"))
    assert code == 0, err
    code, via_file, err = run("plan", "m", "--profiles-dir", str(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(direct)["per_gpu"] == json.loads(via_file)["per_gpu"]
    assert json.loads(direct)["kv_bytes_per_token"] == 131_072 // 2  # TP 2 from --gpus 2


@pytest.mark.parametrize(
    ("gpu", "version", "expected"),
    [
        ("h100", "0.19.0", (1024, 8192)),  # the corpus logs: "Defaulting max_num_seqs to 1024"
        ("a100-80gb", "0.19.0", (256, 2048)),  # excluded by name since 0.9.0
        ("a100-80gb", "0.8.5", (1024, 8192)),
        ("h100", "0.7.3", (256, 8192)),
        ("l4", "0.11.0", (256, 2048)),  # the corpus L4 log: max_num_batched_tokens=2048
        ("gh200", "0.10.1", (1024, 8192)),
        ("gb10", "0.13.0", (256, 2048)),  # NVML has no total: the corpus GB10 log's 2048
        ("b200", "0.25.0", (1024, 8192)),
        ("b200", "0.32.0", (1024, 16384)),
    ],
)
def test_batch_defaults_follow_the_vllm_version_and_gpu(
    gpu: str, version: str, expected: tuple[int, int]
) -> None:
    """max_num_seqs / max_num_batched_tokens are vLLM's OpenAI-server defaults for the GPU."""
    found = batch_defaults(lookup_gpu(gpu), version)
    assert (found.max_num_seqs, found.max_num_batched_tokens) == expected


def test_max_model_len_from_the_text_backbone_and_rope() -> None:
    """The text config's length key, times a linear RoPE factor, never Gemma 3's."""
    assert derived_max_model_len({"text_config": {"max_position_embeddings": 4096}})[0] == 4096
    linear = {"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}
    assert derived_max_model_len(linear)[0] == 16384
    gemma = {"model_type": "gemma3", "text_config": {**linear, "model_type": "gemma3_text"}}
    assert derived_max_model_len(gemma)[0] == 4096


def test_missing_fields_are_one_line(tmp_path: Path) -> None:
    """A config without the facts servekit needs: one line, exit 1 or 2."""
    config = _config("meta-llama/Llama-3.1-8B-Instruct")
    del config["hidden_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code, _, err = run("profiles", "new", "x", "--model-config", str(path), "--gpu", "h100",
                       "--gpus", "1")  # fmt: skip
    assert "hidden_size" in _one_line_error(code, err)


def test_unknown_model_type_is_one_line(llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser's unknown-model_type error reaches the user as one line, exit 1 or 2."""

    def refuse(config: object) -> None:
        raise ModelDirError(
            "model_type 'brand_new' is not one servekit knows",
            fix="state model.architecture (num_hidden_layers, hidden_size, ...) in a profile",
        )

    monkeypatch.setattr("servekit.plan.model_config.model_facts_from_config", refuse)
    for command in (["profiles", "new", "x"], ["plan"]):
        code, _, err = run(*command, "--model-config", str(llama), "--gpu", "h100", "--gpus", "1")
        assert "brand_new" in _one_line_error(code, err)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "tpu-v5", "--gpus", "1"], "unknown GPU 'tpu-v5'"),
        (["--gpu", "h100", "--gpus", "3"], "does not divide the 32 attention heads"),
        (["--gpu", "h100", "--gpus", "4", "--set", "tensor_parallel_size=2"], "= 2 GPUs"),
        (["--gpu", "h100", "--gpus", "1", "--set", "max_num_seq=4"], "did you mean max_num_seqs"),
        (["--gpu", "h100", "--gpus", "1", "--set", "gpu_memory_utilization=2"], "outside (0, 1]"),
        (["--gpu", "h100", "--gpus", "1", "--engine-version", "9.0.0"], "newer than"),
        (["--gpu", "h100"], "needs --gpu and --gpus"),
        (["--gpu", "h100", "--gpus", "1", "--set", "max_model_len"], "is not key=value"),
    ],
)
def test_bad_input_is_one_line(llama: Path, args: list[str], needle: str) -> None:
    """An unknown GPU, a TP that cannot shard the heads, TP x PP x DP != --gpus, a bad --set
    key or value, an unknown engine version: one line each, exit 1 or 2."""
    code, _, err = run("profiles", "new", "x", "--model-config", str(llama), *args)
    assert needle in _one_line_error(code, err)


def test_plan_needs_exactly_one_of_profile_or_model_config(llama: Path) -> None:
    """plan with both PROFILE and --model-config, or neither, is a usage error."""
    code, _, err = run("plan", "llama-3.1-70b-4xh100", "--model-config", str(llama))
    assert code == 2
    assert "exactly one of PROFILE or --model-config" in _one_line_error(code, err)
    code, _, err = run("plan")
    assert code == 2


def test_new_refuses_to_overwrite(llama: Path, tmp_path: Path) -> None:
    """-o never replaces an existing file, and must be named after the profile."""
    out = tmp_path / "x.yaml"
    out.write_text("keep me\n", encoding="utf-8")
    base = ["profiles", "new", "x", "--model-config", str(llama), "--gpu", "h100", "--gpus", "1"]
    code, _, err = run(*base, "-o", str(out))
    assert "exists" in _one_line_error(code, err)
    assert out.read_text(encoding="utf-8") == "keep me\n"
    code, _, err = run(*base, "-o", str(tmp_path / "y.yaml"))
    assert "not named after" in _one_line_error(code, err)


def test_a_model_directory_reads_config_and_safetensors_headers(tmp_path: Path) -> None:
    """PATH may be a model directory: its config.json gives the facts and the shards'
    headers the checkpoint bytes (plan --json's `checkpoint` block)."""
    import numpy as np
    from safetensors.numpy import save_file

    model = tmp_path / "Llama-3.1-8B-Instruct"
    model.mkdir()
    config = _config("meta-llama/Llama-3.1-8B-Instruct")
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file(
        {"lm_head.weight": np.zeros((8, 4), dtype=np.float16)}, str(model / "model.safetensors")
    )
    code, out, err = run("plan", "--model-config", str(model), "--gpu", "h100", "--gpus", "1",
                         "--set", "max_model_len=8192", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["checkpoint"]["total_bytes"] == 8 * 4 * 2
    code, out, err = run("profiles", "new", "d", "--model-config", str(model), "--gpu", "h100",
                         "--gpus", "1")  # fmt: skip
    assert code == 0, err
    assert yaml.safe_load(out)["model"]["path"] == str(model)
    assert "Llama-3.1-8B-Instruct/config.json" in yaml.safe_load(out)["description"]


def test_set_values_shape_the_defaults(llama: Path) -> None:
    """--set PP fills TP from --gpus, chunked prefill off raises the token budget to
    max_model_len, and online --quantization fp8 plans fp8 weights."""
    code, out, err = run(
        "profiles", "new", "t", "--model-config", str(llama), "--gpu", "h100", "--gpus", "8",
        "--set", "pipeline_parallel_size=2", "--set", "enable_chunked_prefill=false",
        "--set", "max_model_len=32768", "--set", "quantization=fp8",
    )  # fmt: skip
    assert code == 0, err
    document = yaml.safe_load(out)
    args = document["serve_args"]
    assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (4, 2)
    assert args["max_num_batched_tokens"] == 32768
    assert document["model"]["quantization"] == "fp8"


def test_a_name_that_cannot_be_a_file_is_refused(llama: Path) -> None:
    """NAME must be a profile (file) name: one line with a safe suggestion."""
    code, _, err = run("profiles", "new", "my model", "--model-config", str(llama),
                       "--gpu", "h100", "--gpus", "1")  # fmt: skip
    assert "use e.g. my-model" in _one_line_error(code, err)
