"""What is wrong with a model directory path, in the words plan and doctor share (core)."""

from __future__ import annotations


def model_path_problem(kind: str, where: str, role: str = "model") -> str | None:
    """What is wrong with a model path whose `kind` is `checkpoint.path_kind`'s ("a file",
    "a symlink loop", "missing", ...): "model directory X not found", "model path X is a
    symlink loop, not a directory"; None for a directory. `role` is "model" or "draft"."""
    if kind == "a directory":
        return None
    if kind == "missing":
        return f"{role} directory {where} not found"
    return f"{role} path {where} is {kind}, not a directory"
