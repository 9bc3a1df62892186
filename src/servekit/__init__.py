"""servekit: plan, launch, validate and load-test LLMs served by vLLM (core)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("servekit")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
