"""Startup stages from real and reference vLLM logs."""

from __future__ import annotations

from pathlib import Path

from servekit.runtime.stages import STAGES, StageTracker

TESTS = Path(__file__).parents[1]


def _stages(path: Path) -> list[str]:
    tracker = StageTracker()
    reached = []
    for line in path.read_text(errors="replace").splitlines():
        reached += tracker.feed(line)
    return reached


def test_cpu_engine_start_goes_weights_profiling_kv_ready() -> None:
    """A real vLLM 0.32 CPU start: no CUDA graphs, so KV cache then ready."""
    assert _stages(TESTS / "render" / "data" / "vllm_cpu_0320_startup.log") == [
        "weights", "profiling", "kv_cache", "ready",
    ]  # fmt: skip


def test_gpu_engine_start_has_every_stage() -> None:
    """The reference M3 start on 8 GPUs passes through every stage in order."""
    assert _stages(TESTS / "plan" / "data" / "m3_a800_tp8.log") == list(STAGES[1:])


def test_stages_never_go_back() -> None:
    """Another rank's late weights line after the KV cache is sized changes nothing."""
    tracker = StageTracker()
    assert tracker.feed("INFO GPU KV cache size: 1,000 tokens") == ["kv_cache"]
    assert tracker.feed("INFO Model loading took 58.5 GiB memory and 104 seconds") == []
    assert tracker.mark_ready()
    assert not tracker.mark_ready()
