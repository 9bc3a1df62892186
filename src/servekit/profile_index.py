"""The built-in profiles' list, cached (shell: reads the package's files).

`servekit profiles list` must start in well under 150 ms, and loading six profiles through
their pydantic schema costs more than that. The `profiles list --json` document of the built-in
profiles (built by its model, `servekit.results.profiles.ProfilesDocument`) is therefore
checked in beside them (`profiles/data/index.json`, written by
`python -m servekit.report.profile_list`), with the SHA-256 of every built-in profile file
it was made from; the table and `--json` print from it. The cache is used only when every
hash matches the files as they are now and no user profile directory is searched; anything
else (a missing, unreadable or malformed index, a changed, added or removed file) is a miss,
and the caller loads the profiles the exact way. A test regenerates the index and compares
it with the checked-in one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

BUILTIN_DIR = Path(__file__).parent / "profiles" / "data"
PROFILE_PATH_ENV = "SERVEKIT_PROFILE_PATH"
INDEX_FILE = "index.json"
INDEX_VERSION = 1
DOCUMENT_VERSION = 1  # servekit.results.profiles.PROFILES_VERSION (a test checks it)
ROW_KEYS = ("name", "source", "model", "gpus", "image", "description")


def profile_files(directory: Path = BUILTIN_DIR) -> list[Path]:
    """The profile files of a directory, in the order the loader lists them."""
    return sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])


def file_hashes(directory: Path = BUILTIN_DIR) -> dict[str, str]:
    """SHA-256 (hex) of each profile file's bytes, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in profile_files(directory)}


def index_document(document: Mapping[str, object], directory: Path = BUILTIN_DIR) -> str:
    """The index file's text: `document` (the `profiles list --json` document of the built-in
    profiles, built by its model) and the hashes of the files of `directory` now."""
    index = {"index_version": INDEX_VERSION, "files": file_hashes(directory),
             "document": document}  # fmt: skip
    return json.dumps(index, indent=1, ensure_ascii=False) + "\n"


def cached_document(
    extra_dirs: tuple[str, ...] = (), directory: Path = BUILTIN_DIR
) -> dict[str, object] | None:
    """The built-in profiles' `profiles list --json` document from the index, or None when it
    cannot be trusted: a user directory is searched (`extra_dirs` or $SERVEKIT_PROFILE_PATH),
    or the index is missing, malformed or made from other files than those there now."""
    if extra_dirs or os.environ.get(PROFILE_PATH_ENV):
        return None
    try:
        index = json.loads((directory / INDEX_FILE).read_text(encoding="utf-8"))
        current = file_hashes(directory)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(index, dict) or index.get("index_version") != INDEX_VERSION:
        return None
    document = index.get("document")
    if index.get("files") != current or not isinstance(document, dict):
        return None
    rows = document.get("profiles")
    names = [Path(name).stem for name in current]  # the files hashed, in the loader's order
    if (
        list(document) != ["schema_version", "profiles"]
        or document["schema_version"] != DOCUMENT_VERSION
        or not isinstance(rows, list)
        or not all(_is_row(r) for r in rows)
        or [r["name"] for r in rows] != names
    ):
        return None
    return document


def _is_row(row: object) -> bool:
    return (
        isinstance(row, dict)
        and list(row) == list(ROW_KEYS)
        and all(isinstance(v, str) for v in row.values())
    )
