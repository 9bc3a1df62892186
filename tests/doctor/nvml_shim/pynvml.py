"""A stand-in `pynvml` module: 8 healthy A800s (put this directory first on PYTHONPATH)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fake_nvml import FakeNvml

_FAKE = FakeNvml()
NVML_NVLINK_MAX_LINKS = _FAKE.NVML_NVLINK_MAX_LINKS
NVML_FEATURE_ENABLED = _FAKE.NVML_FEATURE_ENABLED
NVML_DEVICE_MIG_ENABLE = _FAKE.NVML_DEVICE_MIG_ENABLE
nvmlInit = _FAKE.nvmlInit
nvmlShutdown = _FAKE.nvmlShutdown
nvmlDeviceGetCount = _FAKE.nvmlDeviceGetCount
nvmlDeviceGetHandleByIndex = _FAKE.nvmlDeviceGetHandleByIndex
nvmlDeviceGetName = _FAKE.nvmlDeviceGetName
nvmlDeviceGetMemoryInfo = _FAKE.nvmlDeviceGetMemoryInfo
nvmlDeviceGetCudaComputeCapability = _FAKE.nvmlDeviceGetCudaComputeCapability
nvmlSystemGetDriverVersion = _FAKE.nvmlSystemGetDriverVersion
nvmlSystemGetCudaDriverVersion = _FAKE.nvmlSystemGetCudaDriverVersion
nvmlDeviceGetNvLinkState = _FAKE.nvmlDeviceGetNvLinkState
nvmlDeviceGetMigMode = _FAKE.nvmlDeviceGetMigMode
