"""The fixed names options choose from (core): render targets, runtimes, the engine version.

They live in this small module, not beside the machinery that uses them, so that a
command's `--help` (which lists the choices) never imports that machinery.
"""

from __future__ import annotations

TARGETS = ("vllm", "docker", "compose", "k8s", "script")
"""Target names `render` accepts, in the order help text lists them."""

RUNTIMES = ("process", "docker")
"""How `up` (and `tune`'s verification) starts an engine: a process group or a container."""

NEWEST_KNOWN_ENGINE = "0.32.0"
"""The newest vLLM release whose accounting and defaults servekit has read (the installed
v0.32.0 in servekit's development environment); `profiles new` and `plan` default to it."""
