"""servekit: plan, launch, validate and load-test LLMs served by vLLM (core)."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """`servekit.__version__`, read from the installed metadata on first use.

    Lazy because importing `importlib.metadata` costs more than a cheap command's work.
    """
    if name != "__version__":
        raise AttributeError(f"module 'servekit' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("servekit")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
