"""Engine patch diffs sorted by what a wheel install can take (core).

A pull request's diff touches the `vllm/` package, and usually also its tests,
docs and sometimes compiled kernels (`csrc/`, CUDA, C++, CMake). An image built
from a released wheel holds only the installed `vllm` package: Python files under
`vllm/` can be patched in place, tests and docs are not installed (dropped), and
compiled sources cannot be rebuilt without a source build (refused unless the
user accepts running without them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchedFile, PatchSet

from servekit.errors import ConfigError

PACKAGE_DIR = "vllm/"
"""Paths under this prefix belong to the installed package and are applied."""

FileKind = Literal["package", "compiled", "other"]
"""How one changed file is treated: applied, refused (compiled) or dropped."""

_DEV_NULL = "/dev/null"
_COMPILED_DIRS = ("csrc/", "cmake/")
_COMPILED_SUFFIXES = frozenset(
    {".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hip", ".cmake"}
)
_COMPILED_NAMES = frozenset({"CMakeLists.txt"})
# `patch -p1` strips one leading directory: git's `a/` and `b/`.
_SOURCE_PREFIX = "a/"
_TARGET_PREFIX = "b/"


@dataclass(frozen=True, slots=True)
class FilteredPatch:
    """One profile patch reduced to the files of the installed package.

    Attributes:
        name: the patch's name in the profile.
        url: where the patch came from (a URL or a local path), as the profile says.
        text: a unified diff of only the files under `vllm/`, git-style (`a/`, `b/`).
        applied: paths under `vllm/` the diff changes.
        dropped: paths outside the package and not compiled (tests, docs, CI files).
        compiled: compiled sources (kernels, C++, CMake) the image cannot rebuild.
    """

    name: str
    url: str
    text: str
    applied: tuple[str, ...]
    dropped: tuple[str, ...]
    compiled: tuple[str, ...]


def classify_path(path: str) -> FileKind:
    """Return how a repository path is treated when patching an installed wheel.

    Compiled sources win over the package prefix: a `.cu` file under `vllm/` is
    still a kernel that only a source build compiles.

    Example:
        `classify_path("vllm/attention/ops.py")` is `"package"`,
        `classify_path("csrc/topk.cu")` is `"compiled"`,
        `classify_path("tests/kernels/test_topk.py")` is `"other"`.
    """
    pure = PurePosixPath(path)
    if (
        path.startswith(_COMPILED_DIRS)
        or pure.suffix in _COMPILED_SUFFIXES
        or pure.name in _COMPILED_NAMES
    ):
        return "compiled"
    if path.startswith(PACKAGE_DIR):
        return "package"
    return "other"


def filter_patch(name: str, url: str, text: str) -> FilteredPatch:
    """Parse a unified diff and keep only the files of the installed `vllm` package.

    Args:
        name: the patch's name in the profile (used in every message).
        url: where the text came from, recorded as is.
        text: the whole diff, e.g. a GitHub pull request's `.diff`.

    Raises:
        ConfigError: the text is not a unified diff, or it changes a package file in a
            way `patch -p1` cannot apply (binary, no `a/`/`b/` prefixes, or moved in or
            out of `vllm/`).
    """
    try:
        files = PatchSet(text)
    except UnidiffParseError as exc:
        raise ConfigError(
            f"patch {name} ({url}) is not a valid unified diff: {exc}",
            fix="point the patch's url at a pull request's .diff or a `git diff` output",
        ) from None
    if not files:
        raise ConfigError(
            f"patch {name} ({url}) holds no file changes",
            fix="point the patch's url at a pull request's .diff or a `git diff` output",
        )
    kept: list[PatchedFile] = []
    dropped: list[str] = []
    compiled: list[str] = []
    for changed in files:
        kind = _file_kind(name, changed)
        if kind == "package":
            _check_appliable(name, changed)
            kept.append(changed)
        elif kind == "compiled":
            compiled.append(changed.path)
        else:
            dropped.append(changed.path)
    return FilteredPatch(
        name=name,
        url=url,
        text="".join(str(changed) for changed in kept),
        applied=tuple(changed.path for changed in kept),
        dropped=tuple(dropped),
        compiled=tuple(compiled),
    )


def _headers(changed: PatchedFile) -> list[tuple[str, str]]:
    """Return each real side's header path (quotes removed) with the prefix it needs."""
    pairs = [(changed.source_file, _SOURCE_PREFIX), (changed.target_file, _TARGET_PREFIX)]
    return [(raw.strip('"'), prefix) for raw, prefix in pairs if raw and raw != _DEV_NULL]


def _file_kind(name: str, changed: PatchedFile) -> FileKind:
    kinds = {classify_path(raw.removeprefix(prefix)) for raw, prefix in _headers(changed)}
    if "compiled" in kinds:
        return "compiled"
    if kinds == {"package"}:
        return "package"
    if "package" in kinds:
        raise ConfigError(
            f"patch {name} moves {changed.source_file} to {changed.target_file}, across the "
            f"edge of the installed {PACKAGE_DIR} package",
            fix="edit the patch so the file stays inside or outside vllm/",
        )
    return "other"


def _check_appliable(name: str, changed: PatchedFile) -> None:
    if changed.is_binary_file:
        raise ConfigError(
            f"patch {name} changes the binary file {changed.path}, which `patch` cannot apply",
            fix="build the image from a vLLM source tree with that change instead",
        )
    for raw, prefix in _headers(changed):
        if not raw.startswith(prefix):
            raise ConfigError(
                f"patch {name} names {raw!r} without git's {prefix!r} prefix; servekit "
                "applies patches with `patch -p1`",
                fix="make the patch with `git diff` or take a pull request's .diff",
            )
