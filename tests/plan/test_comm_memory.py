"""Communication memory inside vLLM's KV budget: which releases and parallelism warn.

Releases up to v0.10.1 create every communicator after the memory snapshot (one warning,
from the accounting rules); v0.11.0 to v0.21.0 create PyTorch's NCCL communicator of the
TP group lazily, at the profiling run's logits all-gather; from v0.25 that all-gather goes
through PyNccl, created before the snapshot. Pipeline parallelism adds no such term.
"""

from __future__ import annotations

import pytest
from known_models import LLAMA31_8B

from servekit.hardware import lookup_gpu
from servekit.plan import PlanInputs
from servekit.plan.comm_memory import PUBLIC_TP_FIGURE, comm_memory_warnings
from servekit.plan.engine_rules import accounting_for
from servekit.plan.fit import make_plan
from servekit.plan.inputs import model_spec


def _inputs(version: str, tp: int = 1, pp: int = 1) -> PlanInputs:
    """Llama-3.1-8B on H100 at a release and parallel layout."""
    return PlanInputs(
        model=model_spec("llama", LLAMA31_8B, "bf16"),
        gpu=lookup_gpu("H100"),
        draft=None,
        max_model_len=8192,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        accounting=accounting_for(version, {}),
    )


@pytest.mark.parametrize("version", ["0.11.0", "0.19.0", "0.21.0"])
def test_lazy_tp_communicator_warns_with_the_public_figure(version: str) -> None:
    """TP2 on a release that creates torch's NCCL communicator in profiling warns, citing PR
    #10511's 1.79 GiB."""
    (warning,) = comm_memory_warnings(_inputs(version, tp=2))
    assert f"vLLM {version}" in warning
    assert "TP2" in warning
    assert PUBLIC_TP_FIGURE in warning
    assert "1.79 GiB" in warning


@pytest.mark.parametrize(
    ("version", "tp", "pp"),
    [
        ("0.19.0", 1, 1),  # no TP group
        ("0.19.0", 1, 2),  # PP send/recv: PyNccl, created before the snapshot
        ("0.25.1", 2, 1),  # the all-gather goes through PyNccl
        ("0.32.0", 4, 1),
        ("0.10.1", 2, 1),  # the older, broader warning of the accounting rules covers it
    ],
)
def test_no_lazy_communicator_warning(version: str, tp: int, pp: int) -> None:
    """Without a TP group, or where no communicator is created during profiling, no warning."""
    assert comm_memory_warnings(_inputs(version, tp=tp, pp=pp)) == []


def test_plan_carries_the_warning_and_leaves_the_budget_alone() -> None:
    """The warning reaches the plan; the non-torch term stays the profiling-run constant."""
    tp1 = make_plan(_inputs("0.19.0"))
    tp2 = make_plan(_inputs("0.19.0", tp=2))
    assert any(PUBLIC_TP_FIGURE in w for w in tp2.warnings)
    assert not any(PUBLIC_TP_FIGURE in w for w in tp1.warnings)
    assert tp2.non_torch_bytes == tp1.non_torch_bytes
