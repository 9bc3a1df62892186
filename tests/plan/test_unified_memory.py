"""A unified-memory GPU (GB10) gets a warning that host memory growth comes out of the KV
budget; discrete GPUs do not."""

from __future__ import annotations

from servekit.hardware import lookup_gpu
from servekit.plan import make_plan
from servekit.plan.inputs import PlanInputs, model_spec
from servekit.specs import ArchitectureSpec

ARCH = ArchitectureSpec(num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                        head_dim=128, vocab_size=128256, intermediate_size=14336)  # fmt: skip


def _warnings(gpu: str) -> tuple[str, ...]:
    inputs = PlanInputs(model=model_spec("m", ARCH, "bf16"), gpu=lookup_gpu(gpu), draft=None,
                        max_model_len=8192, gpu_memory_utilization=0.5)  # fmt: skip
    return make_plan(inputs).warnings


def test_unified_memory_gpu_warns_about_host_growth() -> None:
    """GB10: the plan says host memory growth counts against the KV budget."""
    assert any("shares one memory between CPU and GPU" in w for w in _warnings("gb10"))


def test_discrete_gpu_has_no_unified_memory_warning() -> None:
    """H100: no such warning."""
    assert not any("shares one memory" in w for w in _warnings("h100"))
