"""Tests for the GPU catalog."""

from __future__ import annotations

import pytest

from servekit.errors import ConfigError
from servekit.hardware import gpu_names, lookup_gpu

REQUIRED = ["A800", "A100-40GB", "A100-80GB", "H800", "H100", "H200", "H20", "B200", "L40S"]


@pytest.mark.parametrize("name", REQUIRED)
def test_catalog_has_required_gpus_with_sources(name: str) -> None:
    """Every GPU the planner promises is in the catalog with a cited source."""
    gpu = lookup_gpu(name)
    assert gpu.memory_mib > 0
    assert gpu.sources


def test_a800_facts() -> None:
    """A800 80GB: 81,920 MiB, sm80, NVLink 400 GB/s, no FP8."""
    gpu = lookup_gpu("NVIDIA A800-SXM4-80GB")
    assert (gpu.memory_mib, gpu.sm, gpu.nvlink_gb_s, gpu.fp8) == (81920, 80, 400, False)


def test_unknown_gpu_suggests() -> None:
    """An unknown GPU name fails with close matches and the catalog's names."""
    with pytest.raises(ConfigError, match=r"unknown GPU 'H10'.*known GPUs"):
        lookup_gpu("H10")
    assert "L40S" in gpu_names()


# Streaming multiprocessors per catalog GPU: the table activations.py kept before the catalog
# carried them (datasheets and architecture whitepapers, cited in each entry's sources).
SM_COUNTS = {
    "A800-80GB-SXM": 108, "A100-80GB-SXM": 108, "A100-40GB-SXM": 108, "A10": 72, "L4": 58,
    "L40S": 142, "RTX-3090": 82, "H800-SXM": 132, "H100-80GB-SXM": 132, "H200-SXM": 132,
    "GH200": 132, "H20": 78, "B200": 148, "GB10": 48,
}  # fmt: skip


# CPU hosts in the catalog (the engine tier's vLLM CPU): no streaming multiprocessors.
CPU_HOSTS = {"CPU-EPYC-ZEN4-1CORE"}


def test_every_gpu_has_its_sm_count_with_a_source() -> None:
    """Every GPU entry states its SM count, and one of its sources cites it."""
    assert set(SM_COUNTS) | CPU_HOSTS == set(gpu_names())
    for name, count in SM_COUNTS.items():
        gpu = lookup_gpu(name)
        assert gpu.sm_count == count, name
        assert any(s.startswith(f"sm_count: {count} SMs") for s in gpu.sources), name


def test_cpu_host_states_measured_figures() -> None:
    """The CPU host entry is vLLM CPU's device ('cpu'), has no SMs or FP8, and says its
    bandwidth was measured and its compute peak checked by a measurement, naming the script."""
    gpu = lookup_gpu("cpu-host")
    assert (gpu.name, gpu.device_name, gpu.sm_count, gpu.fp8) == (
        "CPU-EPYC-ZEN4-1CORE", "cpu", None, False)  # fmt: skip
    for field in ("hbm_gb_s", "bf16_dense_tflops"):
        assert any(s.startswith(f"{field}: ") and "measure_cpu_host.py" in s
                   for s in gpu.sources), field  # fmt: skip
