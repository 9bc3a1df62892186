"""`sim fit -o` is checked before the fit: a loadable profile name in an existing directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli

PROFILE = "llama-3.1-70b-4xh100"


@pytest.fixture(autouse=True)
def no_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any fit (or the reading of runs before it) fail loudly: the check comes first."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the fit ran before the output path was checked")

    monkeypatch.setattr("servekit.bench.run_points.read_runs", refuse)
    monkeypatch.setattr("servekit.sim.calibrate.calibrate", refuse)


def fit(tmp_path: Path, output: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["sim", "fit", str(tmp_path), "--profile", PROFILE, "-o", output]
    )
    return result.exit_code, result.stderr


@pytest.mark.parametrize(
    ("name", "suggested"),
    [("bad name$(id).yaml", "bad-name-id.yaml"), ("fitted.txt", "fitted.yaml")],
)
def test_unloadable_output_name_is_a_usage_error(tmp_path: Path, name: str, suggested: str) -> None:
    """A name the loader could not load back is refused, suggesting a safe one."""
    code, err = fit(tmp_path, str(tmp_path / name))
    assert code == 2, err
    assert "is not a loadable profile file name" in err
    assert suggested in err


def test_missing_output_directory_is_a_usage_error(tmp_path: Path) -> None:
    """-o missing/dir/x.yaml fails before the fit with one line, not a traceback after it."""
    code, err = fit(tmp_path, str(tmp_path / "missing" / "dir" / "x.yaml"))
    assert code == 2, err
    assert "its directory does not exist" in err
    assert len(err.strip().splitlines()) == 1
