"""`servekit profiles show --json` as a typed model (core): the merged profile, versioned."""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue

from servekit.profiles.schema import Profile
from servekit.results import Document

PROFILE_SHOW_VERSION: Literal[1] = 1


class ProfileDocument(Document):
    """One profile with `extends:` merged and overrides applied.

    Attributes:
        profile: the profile, as `profiles show` prints it in YAML (a loadable profile).
    """

    schema_version: Literal[1]
    profile: Profile

    def as_json(self) -> dict[str, JsonValue]:
        """The document as `profiles show` prints it: the profile by its file's key names,
        keys without a value left out (as in the YAML view)."""
        profile = self.profile.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"schema_version": self.schema_version, "profile": profile}
