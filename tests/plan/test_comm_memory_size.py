"""The lazy TP communicator's size: public figures by interconnect, quoted, not planned.

No NCCL buffer count reproduces the public vLLM figures (docs/memory-model.md section 5), so
the plan keeps the budget and warns with the range published for the GPU's interconnect:
1.8-2.1 GiB per GPU on NVLink/NVSwitch GPUs, at most 0.25 GiB over PCIe.
"""

from __future__ import annotations

import pytest
from known_models import LLAMA31_8B

from servekit.hardware import lookup_gpu
from servekit.plan import PlanInputs
from servekit.plan.comm_memory import (
    PUBLIC_FIGURES,
    PUBLIC_TP_FIGURE,
    comm_memory_warnings,
    gpu_link,
    public_range_gib,
)
from servekit.plan.engine_rules import accounting_for
from servekit.plan.fit import make_plan
from servekit.plan.inputs import model_spec


def _inputs(gpu: str, tp: int, version: str = "0.19.0") -> PlanInputs:
    """Llama-3.1-8B at a TP size on a catalog GPU."""
    return PlanInputs(
        model=model_spec("llama", LLAMA31_8B, "bf16"),
        gpu=lookup_gpu(gpu),
        draft=None,
        max_model_len=8192,
        tensor_parallel_size=tp,
        accounting=accounting_for(version, {}),
    )


def test_public_figures_are_sourced_and_split_by_interconnect() -> None:
    """Every figure has a public URL and a TP size; PCIe figures sit far below NVLink ones."""
    assert {f.link for f in PUBLIC_FIGURES} == {"nvlink", "pcie"}
    for figure in PUBLIC_FIGURES:
        assert figure.url.startswith("https://github.com/")
        assert figure.tp >= 2
    assert public_range_gib("nvlink") == (pytest.approx(1.79), pytest.approx(2.10))
    assert public_range_gib("pcie")[1] < public_range_gib("nvlink")[0] / 5


@pytest.mark.parametrize(
    ("gpu", "link"),
    [("H100", "nvlink"), ("A100-80GB", "nvlink"), ("L40S", "pcie"), ("A10", "pcie")],
)
def test_gpu_link_follows_the_catalog_nvlink_rate(gpu: str, link: str) -> None:
    """SXM parts in the catalog carry an NVLink rate; PCIe-only cards do not."""
    assert gpu_link(_inputs(gpu, 2)) == link


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_nvlink_warning_quotes_the_nvlink_range(tp: int) -> None:
    """On an NVLink GPU the warning gives the published 1.79-2.10 GiB per-GPU range."""
    (warning,) = comm_memory_warnings(_inputs("H100", tp))
    assert f"TP{tp}" in warning
    assert "1.79-2.10 GiB per GPU" in warning
    assert PUBLIC_TP_FIGURE in warning


def test_pcie_warning_quotes_the_pcie_figure_not_the_nvlink_one() -> None:
    """On a PCIe-only GPU the warning quotes the PCIe figure (0.25 GiB), not H100's 1.79 GiB."""
    (warning,) = comm_memory_warnings(_inputs("L40S", 2))
    assert "0.25 GiB" in warning
    assert "PCIe" in warning
    assert "1.79" not in warning


@pytest.mark.parametrize("gpu", ["H100", "L40S"])
def test_the_budget_stays_the_profiling_constant(gpu: str) -> None:
    """The term stays unplanned: TP2's non-torch bytes equal TP1's on either interconnect."""
    assert make_plan(_inputs(gpu, 2)).non_torch_bytes == make_plan(_inputs(gpu, 1)).non_torch_bytes
