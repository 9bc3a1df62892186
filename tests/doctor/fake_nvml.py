"""A fake of pynvml's functions for doctor tests: 8 A800s on NVLink, or configurable.

Importable two ways: tests pass `FakeNvml(...)` to `probe_gpus`, and the CLI test puts
this directory's `pynvml.py` shim first on PYTHONPATH so `import pynvml` finds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NVML_NVLINK_MAX_LINKS = 12
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_ENABLE = 1
A800_BYTES = 81920 * 2**20


class NVMLError(Exception):
    """Base of the fake's errors, like pynvml's."""


class NVMLErrorNotSupported(NVMLError):
    """Raised for links a GPU does not have and for MIG on GPUs without it."""


@dataclass
class FakeGpu:
    name: str = "NVIDIA A800-SXM4-80GB"
    memory: int = A800_BYTES
    capability: tuple[int, int] = (8, 0)
    links: int = 8
    mig: int | None = 0


@dataclass
class _Memory:
    total: int


@dataclass
class FakeNvml:
    """The pynvml functions doctor calls, over a list of fake GPUs."""

    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu() for _ in range(8)])
    init_error: str | None = None
    driver: str = "535.183.01"
    shutdowns: int = 0
    NVML_NVLINK_MAX_LINKS: int = NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED: int = NVML_FEATURE_ENABLED
    NVML_DEVICE_MIG_ENABLE: int = NVML_DEVICE_MIG_ENABLE

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu) -> bytes:
        return handle.name.encode()

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> _Memory:
        return _Memory(handle.memory)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        return handle.capability

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetNvLinkState(self, handle: FakeGpu, link: int) -> int:
        if link >= handle.links:
            raise NVMLErrorNotSupported("Not Supported")
        return NVML_FEATURE_ENABLED

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> tuple[int, int]:
        if handle.mig is None:
            raise NVMLErrorNotSupported("Not Supported")
        return handle.mig, handle.mig
