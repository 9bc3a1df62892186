"""The built-in profiles' cached list (`servekit.profile_index`): in step with the files, used
only when it can be trusted, and the same rows as loading every profile."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli
from servekit.profile_index import (
    BUILTIN_DIR,
    DOCUMENT_VERSION,
    INDEX_FILE,
    PROFILE_PATH_ENV,
    cached_document,
)
from servekit.report.profile_list import builtin_index_text, profile_rows, profiles_document
from servekit.results.profiles import PROFILES_VERSION


@pytest.fixture(autouse=True)
def no_user_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_PATH_ENV, raising=False)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the built-in profile directory with its index."""
    target = tmp_path / "data"
    shutil.copytree(BUILTIN_DIR, target)
    return target


def test_the_checked_in_index_is_what_the_profiles_give_now() -> None:
    """Regenerate: python -m servekit.report.profile_list."""
    text = (BUILTIN_DIR / INDEX_FILE).read_text(encoding="utf-8")
    assert text == builtin_index_text()
    assert DOCUMENT_VERSION == PROFILES_VERSION


def test_cached_rows_equal_the_rows_of_loading_every_profile() -> None:
    cached = cached_document()
    assert cached is not None
    assert cached == profiles_document(profile_rows()).as_json()


def test_a_changed_added_or_removed_file_is_a_miss(copy: Path) -> None:
    assert cached_document(directory=copy) is not None
    profile = copy / "llama-3.1-70b-4xh100.yaml"
    profile.write_text(profile.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert cached_document(directory=copy) is None
    shutil.copy(BUILTIN_DIR / profile.name, profile)
    assert cached_document(directory=copy) is not None
    (copy / "another.yaml").write_text("name: another\n", encoding="utf-8")
    assert cached_document(directory=copy) is None
    (copy / "another.yaml").unlink()
    (copy / "deepseek-v3-8xh200.yaml").unlink()
    assert cached_document(directory=copy) is None


@pytest.mark.parametrize(
    "damage",
    ["", "not json", "[]", '{"index_version": 2}', "\udcff"],
)
def test_a_missing_or_malformed_index_is_a_miss(copy: Path, damage: str) -> None:
    path = copy / INDEX_FILE
    if damage == "":
        path.unlink()
    else:
        path.write_bytes(damage.encode("utf-8", "surrogateescape"))
    assert cached_document(directory=copy) is None


def test_a_tampered_row_is_a_miss(copy: Path) -> None:
    path = copy / INDEX_FILE
    index = json.loads(path.read_text(encoding="utf-8"))
    index["document"]["profiles"][0]["image"] = 7
    path.write_text(json.dumps(index), encoding="utf-8")
    assert cached_document(directory=copy) is None


def test_user_profile_directories_skip_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user directory may shadow a built-in name: then every profile is loaded, and the
    list shows the user's file."""
    assert cached_document(("somewhere",)) is None
    monkeypatch.setenv(PROFILE_PATH_ENV, str(tmp_path))
    assert cached_document() is None
    monkeypatch.delenv(PROFILE_PATH_ENV)
    user = tmp_path / "user"
    user.mkdir()
    base = (BUILTIN_DIR / "llama-3.1-70b-4xh100.yaml").read_text(encoding="utf-8")
    (user / "llama-3.1-70b-4xh100.yaml").write_text(base, encoding="utf-8")
    result = CliRunner().invoke(cli, ["profiles", "list", "--profiles-dir", str(user), "--json"])
    assert result.exit_code == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)["profiles"]}
    assert rows["llama-3.1-70b-4xh100"]["source"] == str(user / "llama-3.1-70b-4xh100.yaml")
    assert rows["deepseek-v3-8xh200"]["source"] == "built-in"


def test_the_table_and_json_come_from_the_same_rows() -> None:
    listed = CliRunner().invoke(cli, ["profiles", "list", "--json"])
    assert listed.exit_code == 0
    cached = cached_document()
    assert cached is not None
    assert json.loads(listed.stdout) == cached
    table = CliRunner().invoke(cli, ["profiles", "list"], terminal_width=300)
    for row in cached["profiles"]:  # type: ignore[attr-defined]
        assert row["name"] in table.stdout
