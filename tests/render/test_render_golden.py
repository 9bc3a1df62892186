"""Golden-file tests: every built-in profile rendered as every target it has, compared exactly.

A profile spanning several nodes has golden files for the multi-node targets (k8s, script)
only; the single-node targets refuse it. Set SERVEKIT_UPDATE_GOLDEN=1 to rewrite the files,
then review the diff by eye.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servekit.errors import ConfigError, UsageError
from servekit.names import TARGETS
from servekit.profiles import Profile, load_profile
from servekit.profiles.loader import BUILTIN_DIR
from servekit.render import render
from servekit.render.container import MULTI_NODE_TARGETS

GOLDEN_DIR = Path(__file__).parent / "golden"

# Loaded by path, so a user profile of the same name on SERVEKIT_PROFILE_PATH cannot shadow it.
BUILTINS = sorted(path.stem for path in BUILTIN_DIR.glob("*.yaml"))


def _builtin(profile_name: str) -> Profile:
    """Load a built-in profile by its file path."""
    return load_profile(str(BUILTIN_DIR / f"{profile_name}.yaml"))


MULTI_NODE = {name for name in BUILTINS if _builtin(name).hardware.nodes > 1}
RENDERED = [
    (name, target)
    for name in BUILTINS
    for target in TARGETS
    if name not in MULTI_NODE or target in MULTI_NODE_TARGETS
]
REFUSED = [
    (name, target)
    for name in sorted(MULTI_NODE)
    for target in TARGETS
    if (name, target) not in RENDERED
]


@pytest.mark.parametrize(("profile_name", "target"), RENDERED)
def test_rendering_matches_golden_file(
    profile_name: str, target: str, golden: Callable[[str, Path], None]
) -> None:
    """Each built-in profile renders byte-for-byte as its reviewed golden file."""
    text = render(_builtin(profile_name), target)
    golden(text, GOLDEN_DIR / f"{profile_name}.{target}.txt")


@pytest.mark.parametrize(("profile_name", "target"), REFUSED)
def test_multi_node_builtins_are_refused_by_single_node_targets(
    profile_name: str, target: str
) -> None:
    """A multi-node built-in on vllm, docker or compose is a ConfigError naming the fix."""
    with pytest.raises(ConfigError, match="use --target k8s"):
        render(_builtin(profile_name), target)


def test_a_multi_node_builtin_exists() -> None:
    """The multi-node cases above are exercised by at least one built-in profile."""
    assert MULTI_NODE
    assert {target for _, target in REFUSED} == {"vllm", "docker", "compose"}


def test_every_golden_file_belongs_to_a_profile_and_target() -> None:
    """No stale golden files linger for removed profiles or targets, or refused pairs."""
    expected = {f"{name}.{target}.txt" for name, target in RENDERED}
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
