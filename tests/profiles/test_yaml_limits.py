"""Tests for the bounded profile YAML reader: alias bombs, recursion, depth, size, numbers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from servekit.errors import ConfigError
from servekit.profiles import load_profile
from servekit.profiles.yaml_files import MAX_DEPTH, MAX_PROFILE_BYTES, one_line

M3 = "minimax-m3-mxfp8-8xa800"


def billion_laughs() -> str:
    """The classic nine-line alias bomb: 9^9 (387 million) strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_billion_laughs_is_refused_quickly(tmp_path: Path) -> None:
    """A nine-line alias bomb is one ConfigError naming the line, in well under a second."""
    path = write(tmp_path, billion_laughs())
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"p\.yaml:\d+: aliases expand to more than"):
        load_profile(str(path))
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "text", ["a: &a [*a]\n", "a: &a\n  b: *a\n", "a: &a {<<: *a}\n"], ids=["seq", "map", "merge"]
)
def test_recursive_anchor_is_a_config_error(tmp_path: Path, text: str) -> None:
    """An anchor used inside itself is refused, not a RecursionError."""
    with pytest.raises(ConfigError, match="recursive alias"):
        load_profile(str(write(tmp_path, text)))


def test_many_aliases_are_refused(tmp_path: Path) -> None:
    """More than the allowed alias uses is refused even when the expansion is small."""
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * 150) + "]\n"
    with pytest.raises(ConfigError, match="more than 100 alias uses"):
        load_profile(str(write(tmp_path, text)))


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    """Nesting past the depth limit is refused with the line."""
    depth = MAX_DEPTH + 5
    text = "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "v: 1\n"
    with pytest.raises(ConfigError, match=f"nesting deeper than {MAX_DEPTH} levels"):
        load_profile(str(write(tmp_path, text)))


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    """A profile over the size limit is refused before it is parsed."""
    path = write(tmp_path, "description: '" + "x" * MAX_PROFILE_BYTES + "'\n")
    with pytest.raises(ConfigError, match="the limit for a profile"):
        load_profile(str(path))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_not_read(tmp_path: Path) -> None:
    """A FIFO named like a profile is refused at once instead of blocking on it."""
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_profile(str(fifo))


def test_long_sexagesimal_number_is_refused_quickly(tmp_path: Path) -> None:
    """A 1:1:1:... scalar (quadratic in PyYAML) is refused by its length."""
    path = write(tmp_path, "a: 1" + ":1" * 100_000 + "\n")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"p\.yaml:1: invalid YAML: an integer of"):
        load_profile(str(path))
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "scalar", ["2026-02-30", "!!int x", "!!float ''", "!!bool maybe", "!!timestamp x", "0x_"]
)
def test_bad_tagged_scalar_is_a_config_error(tmp_path: Path, scalar: str) -> None:
    """A scalar PyYAML's constructors choke on (ValueError, KeyError ...) is a ConfigError."""
    with pytest.raises(ConfigError, match=r"p\.yaml:1: invalid YAML: .* is not a"):
        load_profile(str(write(tmp_path, f"a: {scalar}\n")))


def test_control_characters_give_one_line(tmp_path: Path) -> None:
    """A reader error (control character) is one line without the raw character."""
    path = tmp_path / "p.yaml"
    path.write_bytes(b"name: p\nx: \x1b[31m\n")
    with pytest.raises(ConfigError) as caught:
        load_profile(str(path))
    assert "\n" not in str(caught.value)
    assert "\x1b" not in str(caught.value)


def test_set_value_alias_bomb_is_refused() -> None:
    """A --set value is parsed with the same limits as a file."""
    bomb = billion_laughs().replace("\n", ", ").rstrip(", ")
    with pytest.raises(ConfigError, match="aliases expand to more than"):
        load_profile(M3, overrides=["description={" + bomb + "}"])


def test_one_line_escapes_and_bounds() -> None:
    """one_line folds whitespace, escapes control characters and bounds the length."""
    assert one_line("a\nb\x1b[0m") == "a b\\x1b[0m"
    assert len(one_line("x" * 500, 50)) == 50
