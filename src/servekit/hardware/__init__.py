"""GPU catalog (data + loader): per-GPU memory, bandwidth and compute facts with sources."""

from servekit.hardware.catalog import gpu_names, load_catalog, lookup_gpu

__all__ = ["gpu_names", "load_catalog", "lookup_gpu"]
