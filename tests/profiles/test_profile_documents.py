"""`profiles list|show|gpus --json` print their versioned documents: schema_version first, and
valid against the checked-in schemas in docs/schemas/ on every path (the cached index, every
profile loaded, a broken user file, overrides)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from servekit import profile_index
from servekit.cli.main import cli
from servekit.profile_index import BUILTIN_DIR, PROFILE_PATH_ENV, cached_document
from servekit.profiles import loader
from servekit.report.profile_list import profile_rows, profiles_document

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
M3 = "minimax-m3-mxfp8-8xa800"


@pytest.fixture(autouse=True)
def no_user_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_PATH_ENV, raising=False)


def _json(schema_file: str, *args: str) -> dict[str, Any]:
    """Run `servekit ARGS --json`; check its output against docs/schemas/SCHEMA_FILE."""
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    schema = json.loads((SCHEMAS / schema_file).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(document)
    assert next(iter(document)) == "schema_version"
    assert document["schema_version"] == 1
    return document


def test_list_from_the_index_and_from_loading_every_profile_is_one_document(
    tmp_path: Path,
) -> None:
    """An empty --profiles-dir skips the index, so every profile is loaded the exact way; the
    document is the same, byte for byte, as the one the index gives."""
    assert cached_document() is not None
    fast = CliRunner().invoke(cli, ["profiles", "list", "--json"])
    slow = CliRunner().invoke(cli, ["profiles", "list", "--json", "--profiles-dir", str(tmp_path)])
    assert fast.exit_code == slow.exit_code == 0, slow.stderr
    assert fast.stdout == slow.stdout
    document = _json("profiles-list.schema.json", "profiles", "list")
    assert list(document) == ["schema_version", "profiles"]
    # in the loader's order: by file name ("x.yaml" after "x-patched.yaml")
    files = sorted(BUILTIN_DIR.glob("*.yaml"))
    assert [r["name"] for r in document["profiles"]] == [f.stem for f in files]


def test_a_changed_built_in_file_lists_what_it_says_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a built-in file changed after the index was made (the built-in directory swapped
    for an edited copy), the list is the exact rows of loading every profile, not the index's."""
    data = tmp_path / "data"
    shutil.copytree(BUILTIN_DIR, data)
    llama = data / "llama-3.1-70b-4xh100.yaml"
    text = llama.read_text(encoding="utf-8")
    llama.write_text(text.replace("32K context", "32K context, edited"), encoding="utf-8")
    monkeypatch.setattr(loader, "BUILTIN_DIR", data)
    monkeypatch.setattr(cached_document, "__defaults__", ((), data))
    assert profile_index.cached_document() is None
    document = _json("profiles-list.schema.json", "profiles", "list")
    assert document == profiles_document(profile_rows()).as_json()
    rows = {r["name"]: r for r in document["profiles"]}
    assert rows["llama-3.1-70b-4xh100"]["description"].endswith("32K context, edited")
    table = CliRunner().invoke(cli, ["profiles", "list"], env={"COLUMNS": "300"})
    assert "32K context, edited" in table.stdout


def test_a_broken_user_profile_is_a_row_with_its_error(tmp_path: Path) -> None:
    """A user file that does not load is a row of name, source and error, valid against the
    schema; the built-in rows beside it keep every key."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\nserve_args: [\n", encoding="utf-8")
    document = _json("profiles-list.schema.json", "profiles", "list", "--profiles-dir",
                     str(tmp_path))  # fmt: skip
    rows = {r["name"]: r for r in document["profiles"]}
    assert list(rows["broken"]) == ["name", "source", "error"]
    assert rows["broken"]["source"] == str(broken)
    assert "invalid YAML" in rows["broken"]["error"]
    assert list(rows[M3]) == ["name", "source", "model", "gpus", "image", "description"]


def test_show_wraps_the_merged_profile_with_overrides() -> None:
    """The profile sits under `profile`, by its file's key names (validate, bench), merged
    and with --set applied."""
    document = _json("profiles-show.schema.json", "profiles", "show", f"{M3}-no-eagle3",
                     "--set", "max_model_len=65536")  # fmt: skip
    assert list(document) == ["schema_version", "profile"]
    profile = document["profile"]
    assert profile["name"] == f"{M3}-no-eagle3"
    assert profile["serve_args"]["max_model_len"] == 65536
    assert "speculative" not in profile
    assert {"validate", "bench"} <= set(profile)


def test_gpus_lists_the_catalog() -> None:
    """Every GPU row has its memory figures and the aliases that find it."""
    document = _json("profiles-gpus.schema.json", "profiles", "gpus")
    assert list(document) == ["schema_version", "gpus"]
    names = [g["name"] for g in document["gpus"]]
    assert names == sorted(names)
    assert any(g["name"].startswith("A800") for g in document["gpus"])
    assert all(g["aliases"] and g["memory_mib"] > 0 for g in document["gpus"])
