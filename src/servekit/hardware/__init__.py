"""GPU catalog (core: packaged data + loader): per-GPU memory, bandwidth and compute facts."""

from servekit.hardware.catalog import gpu_names, load_catalog, lookup_gpu

__all__ = ["gpu_names", "load_catalog", "lookup_gpu"]
