"""Golden-file tests: every built-in profile rendered as every target, compared exactly.

Set SERVEKIT_UPDATE_GOLDEN=1 to rewrite the files, then review the diff by eye.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servekit.deploy import TARGETS, render
from servekit.errors import UsageError
from servekit.profiles import load_profile
from servekit.profiles.loader import BUILTIN_DIR

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SERVEKIT_UPDATE_GOLDEN") == "1"

# Loaded by path, so a user profile of the same name on SERVEKIT_PROFILE_PATH cannot shadow it.
BUILTINS = sorted(path.stem for path in BUILTIN_DIR.glob("*.yaml"))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("profile_name", BUILTINS)
def test_rendering_matches_golden_file(profile_name: str, target: str) -> None:
    """Each built-in profile renders byte-for-byte as its reviewed golden file."""
    text = render(load_profile(str(BUILTIN_DIR / f"{profile_name}.yaml")), target)
    golden = GOLDEN_DIR / f"{profile_name}.{target}.txt"
    if UPDATE:
        golden.write_text(text, encoding="utf-8")
    assert golden.is_file(), f"{golden.name} is missing; run with SERVEKIT_UPDATE_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8")


def test_every_golden_file_belongs_to_a_profile_and_target() -> None:
    """No stale golden files linger for removed profiles or targets."""
    expected = {f"{name}.{target}.txt" for name in BUILTINS for target in TARGETS}
    assert {path.name for path in GOLDEN_DIR.glob("*.txt")} <= expected


def test_targets_are_the_five_documented_ones() -> None:
    """`render` offers exactly the five targets of `servekit render --target`."""
    assert TARGETS == ("vllm", "docker", "compose", "k8s", "script")


def test_every_target_ends_with_one_newline() -> None:
    """Rendered text ends with exactly one newline, so files and terminals show it cleanly."""
    profile = load_profile("minimax-m3-mxfp8-8xa800")
    for target in TARGETS:
        text = render(profile, target)
        assert text.endswith("\n")
        assert not text.endswith("\n\n")


def test_unknown_target_is_a_usage_error_listing_targets() -> None:
    """An unknown target raises UsageError naming the value and every valid target."""
    with pytest.raises(UsageError) as raised:
        render(load_profile("minimax-m3-mxfp8-8xa800"), "helm")
    message = str(raised.value)
    assert "'helm'" in message
    assert "vllm, docker, compose, k8s, script" in message
    assert raised.value.exit_code == 2
