"""`servekit profiles new` defaults that depend on the vLLM release (max_model_len under YaRN
scaling) and `--set` values that are not numbers (one line, never a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli
from servekit.plan.new_profile import derived_max_model_len

# Qwen3-8B with the YaRN block Qwen documents for 128K context (factor 4 over 32768).
QWEN3_YARN = {
    "model_type": "qwen3", "max_position_embeddings": 40960,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                     "original_max_position_embeddings": 32768},
}  # fmt: skip


def test_yarn_length_restarts_from_the_original_length_before_0_30() -> None:
    """vLLM <= 0.28 (config/model.py): YaRN's length is original x factor = 131072."""
    assert derived_max_model_len(QWEN3_YARN, "0.19.0")[0] == 131072
    assert derived_max_model_len(QWEN3_YARN, "0.28.0")[0] == 131072


def test_yarn_length_is_taken_as_already_scaled_from_0_30() -> None:
    """vLLM >= 0.30 takes max_position_embeddings of a YaRN config as the scaled length."""
    assert derived_max_model_len(QWEN3_YARN, "0.30.0")[0] == 40960
    assert derived_max_model_len(QWEN3_YARN)[0] == 40960  # the newest release known


def test_llama3_scaling_is_already_scaled_in_every_release() -> None:
    """Llama 3's rope_type llama3 never multiplies the length."""
    llama = {"max_position_embeddings": 131072,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}  # fmt: skip
    assert derived_max_model_len(llama, "0.19.0")[0] == 131072


@pytest.mark.parametrize("value", ["abc", "128k", "1.5"])
def test_a_max_model_len_that_is_not_a_number_is_one_line(value: str, tmp_path: Path) -> None:
    """--set max_model_len=abc: one line naming the key and the value, exit 1 (was a
    KeyError traceback when max_num_seqs was not set too)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_YARN | {
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 36, "intermediate_size": 12288, "vocab_size": 151936,
        "head_dim": 128}), encoding="utf-8")  # fmt: skip
    for command in (["profiles", "new", "x"], ["plan"]):
        args = [*command, "--model-config", str(path), "--gpu", "h100", "--gpus", "1",
                "--set", f"max_model_len={value}"]  # fmt: skip
        result = CliRunner().invoke(cli, args)
        assert result.exit_code in {1, 2}, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "max_model_len" in lines[0]
        assert value in lines[0]


def test_model_path_is_a_repo_id_or_this_machines_directory(tmp_path: Path) -> None:
    """A config's `_name_or_path` is kept when it is a Hugging Face repo id; a filesystem path
    (another machine's) is replaced by the config's own directory; a model directory is
    written resolved."""
    from servekit.cli._model_profile import checkpoint_path

    config = tmp_path / "config.json"
    repo = {"_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}
    assert checkpoint_path(repo, config, is_dir=False) == "meta-llama/Llama-3.1-8B-Instruct"
    elsewhere = {"_name_or_path": "/nfs/ofs-llm-ssd/models/Meta-Llama-3.1-8B-Instruct"}
    assert checkpoint_path(elsewhere, config, is_dir=False) == str(tmp_path.resolve())
    assert checkpoint_path({}, config, is_dir=False) == str(tmp_path.resolve())
    assert checkpoint_path(repo, Path("."), is_dir=True) == str(Path(".").resolve())


def test_query_heads_not_a_multiple_of_kv_heads_is_one_line(tmp_path: Path) -> None:
    """32 query heads over 6 KV heads cannot be grouped: one line naming both, exit 1."""
    config = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 6, "num_hidden_layers": 32, "intermediate_size": 14336,
              "vocab_size": 128256, "max_position_embeddings": 8192}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    result = CliRunner().invoke(cli, ["plan", "--model-config", str(path), "--gpu", "h100",
                                      "--gpus", "2"])  # fmt: skip
    assert result.exit_code == 1
    assert "num_attention_heads 32 is not a multiple of num_kv_heads 6" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_tp_error_from_model_config_points_at_the_flags(tmp_path: Path) -> None:
    """TP 3 over 32 heads from --model-config: the fix names --gpus and --set, not a file."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096,
                                "num_attention_heads": 32, "num_key_value_heads": 8,
                                "num_hidden_layers": 32, "intermediate_size": 14336,
                                "vocab_size": 128256, "max_position_embeddings": 8192}),
                    encoding="utf-8")  # fmt: skip
    result = CliRunner().invoke(cli, ["plan", "--model-config", str(path), "--gpu", "h100",
                                      "--gpus", "3"])  # fmt: skip
    assert result.exit_code == 1
    assert "does not divide the 32 attention heads" in result.stderr
    assert "choose --gpus" in result.stderr
    assert "correct the profile" not in result.stderr


def test_an_ambiguous_gpu_name_names_both() -> None:
    """`a100` is the 40 GB or the 80 GB card: an error naming both, not 'unknown'."""
    from servekit.errors import ConfigError
    from servekit.hardware import lookup_gpu

    with pytest.raises(ConfigError, match="ambiguous: it names A100-40GB-SXM or A100-80GB-SXM"):
        lookup_gpu("a100")
    assert lookup_gpu("a100-80gb").name == "A100-80GB-SXM"


def test_a_fifo_as_model_config_is_refused_without_waiting(tmp_path: Path) -> None:
    """--model-config naming a FIFO: one line, exit 1, and no wait for a writer (the
    config is read through the project's bounded regular-file reader)."""
    import os

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    result = CliRunner().invoke(cli, ["plan", "--model-config", str(fifo), "--gpu", "h100",
                                      "--gpus", "1"])  # fmt: skip
    assert result.exit_code == 1
    assert "is a FIFO, not a regular file" in result.stderr
