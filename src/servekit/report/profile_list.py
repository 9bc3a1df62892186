"""The rows of `servekit profiles list` (shell: loads profile files), and the built-in
profiles' cached index (`servekit.profile_index`).

`python -m servekit.report.profile_list` rewrites `profiles/data/index.json` from the
built-in profiles as they load now; tests/profiles/test_profile_index.py fails when the
checked-in index differs from what this writes.
"""

from __future__ import annotations

import os
import sys

from servekit.errors import ServekitError
from servekit.profile_index import BUILTIN_DIR, INDEX_FILE, PROFILE_PATH_ENV, index_document
from servekit.profiles import available_profiles, load_profile
from servekit.render import container_image
from servekit.results.profiles import PROFILES_VERSION, ProfileRow, ProfilesDocument


def profile_rows(extra_dirs: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """Every profile found, loaded the exact way: name, source, model, GPUs, image and
    description; a file that does not load gives its name, source and error (one broken
    user file must not hide the others)."""
    rows: list[dict[str, str]] = []
    for ref in available_profiles(extra_dirs).values():
        source = "built-in" if ref.builtin else str(ref.path)
        try:
            p = load_profile(str(ref.path), extra_dirs=extra_dirs)
        except ServekitError as exc:
            rows.append({"name": ref.name, "source": source, "error": str(exc)})
            continue
        rows.append({
            "name": p.name,
            "source": source,
            "model": p.model.path,
            "gpus": f"{p.hardware.nodes * p.hardware.gpus_per_node}x {p.hardware.gpu}",
            "image": container_image(p),
            "description": p.description,
        })  # fmt: skip
    return rows


def profiles_document(rows: list[dict[str, str]]) -> ProfilesDocument:
    """The `profiles list --json` document of `rows`."""
    return ProfilesDocument(
        schema_version=PROFILES_VERSION, profiles=tuple(ProfileRow(**r) for r in rows)
    )


def builtin_index_text() -> str:
    """The index file's text for the built-in profiles as they load now."""
    rows = [r for r in profile_rows() if r["source"] == "built-in"]
    return index_document(profiles_document(rows).as_json())


def main() -> int:
    """Rewrite the built-in profiles' index (refused while $SERVEKIT_PROFILE_PATH could
    shadow a built-in profile or the base it extends)."""
    if os.environ.get(PROFILE_PATH_ENV):
        print(f"unset {PROFILE_PATH_ENV} first: a user profile could shadow a built-in one")
        return 2
    path = BUILTIN_DIR / INDEX_FILE
    path.write_text(builtin_index_text(), encoding="utf-8")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
