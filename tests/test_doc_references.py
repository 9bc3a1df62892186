"""The repository stands alone: no file cites a document outside it, and every `docs/...`,
`benchmarks/...`, `tests/...` or `scripts/...` path a file names exists (issue #29)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Design and style notes that live outside the repository, and the folder they live in.
OUTSIDE = re.compile(r"\b(?:DESIGN|STYLE)\.md\b|\.\./shared\b|shared/reference/")
# A repository path as prose and code cite it: a top folder, then path characters, ending
# in a file name with an extension.
PATH = re.compile(
    r"(?<![\w./-])((?:docs|benchmarks|tests|scripts)/[\w./-]*\.(?:md|py|jsonl|json|yaml|csv|txt))"
    r"(?!\w)"
)
TEXT = (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg")
# Paths that are not this repository's: made at run time (a downloaded CRD), or files of
# vLLM's own tree that the image patches and their tests name.
NOT_OURS = ("tests/render/data/lws/", "tests/kernels/", "docs/models/")


def _files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout.split()  # fmt: skip
    return [ROOT / f for f in listed if f.endswith(TEXT) or f == ".ci/run"]


def _hits(pattern: re.Pattern[str]) -> list[tuple[str, int, str]]:
    out = []
    for path in _files():
        if path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in pattern.finditer(line):
                out.append((str(path.relative_to(ROOT)), number, match.group(0)))
    return out


def test_no_file_cites_a_document_outside_the_repository() -> None:
    """Every fact cited is in the repository's own docs (docs/engine-facts.md, metrics,
    schemas), so a person with only a clone can follow it."""
    assert _hits(OUTSIDE) == []


def test_every_repository_path_named_exists() -> None:
    """A `docs/x.md` or `benchmarks/y.py` named anywhere is a file of the repository."""
    missing = [
        (f, n, p) for f, n, p in _hits(PATH)
        if not (ROOT / p).exists() and not p.startswith(NOT_OURS)
    ]  # fmt: skip
    assert missing == []


@pytest.mark.parametrize("line", ["see DESIGN.md section 4", "from ../shared/reference/x"])
def test_the_outside_pattern_catches_citations(line: str) -> None:
    """The check is not vacuous: both forms of an outside citation match."""
    assert OUTSIDE.search(line)
