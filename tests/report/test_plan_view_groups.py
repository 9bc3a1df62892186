"""The plan's terminal view names vLLM's KV cache groups for a hybrid-attention model (and
stays silent about them for a model with one group)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from servekit.cli.main import cli

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks/corpus/real-startups/configs.jsonl"


def _plan_text(model: str, tmp_path: Path) -> str:
    for line in CONFIGS.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["model"] == model:
            path = tmp_path / "config.json"
            path.write_text(json.dumps(entry["config"]), encoding="utf-8")
            result = CliRunner().invoke(cli, [
                "plan", "--model-config", str(path), "--gpu", "h100", "--gpus", "2",
                "--engine-version", "0.19.0", "--set", "max_model_len=8192",
            ])  # fmt: skip
            assert result.exit_code == 0, result.stderr
            return " ".join(result.stdout.split())
    raise AssertionError(model)


def test_hybrid_model_shows_its_groups_and_blocks(tmp_path: Path) -> None:
    """gpt-oss-20b at TP2: one full and one sliding-window group of 12 layers each."""
    text = _plan_text("openai/gpt-oss-20b", tmp_path)
    assert "KV cache groups (hybrid attention): 1 x full, 1 x sliding_window 128, 12 layers" in text
    assert "blocks of 196,608 B" in text  # 12 layers x 16 tokens x 2 x 4 heads x 64 x 2 B


def test_single_group_model_has_no_group_line(tmp_path: Path) -> None:
    """Llama-3.1-8B has one full-attention group: no group line."""
    assert "KV cache groups" not in _plan_text("meta-llama/Llama-3.1-8B-Instruct", tmp_path)
