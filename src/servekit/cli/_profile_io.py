"""Files the profile commands read and write (shell): a config.json, a profile atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servekit.bench.files import read_json_document
from servekit.errors import ModelDirError
from servekit.profiles import Profile

MAX_CONFIG_BYTES = 16 << 20  # far above any real config.json; a bigger file is not one


def read_config_json(path: Path) -> dict[str, Any]:
    """The JSON object of a config.json, or one line saying why not (read by
    `bench.files.read_json_document`: a regular file of bounded size, UTF-8, strict JSON).

    Raises:
        ServekitError: not a readable regular file, over 16 MiB or not JSON.
        ModelDirError: JSON, but not an object.
    """
    config = read_json_document(
        path, fix="give the model's config.json", max_bytes=MAX_CONFIG_BYTES
    )
    if not isinstance(config, dict):
        raise ModelDirError(f"{path.name} is not a JSON object", fix="give a config.json")
    return config


def profile_yaml(profile: Profile) -> str:
    """The profile as `profiles show` prints it."""
    import yaml

    document = profile.model_dump(mode="json", by_alias=True, exclude_none=True)
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
