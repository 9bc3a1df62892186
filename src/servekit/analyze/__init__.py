"""Analysis (core): per-point metrics, percentiles, comparisons."""
