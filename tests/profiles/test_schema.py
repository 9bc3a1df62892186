"""Tests for the profile schema's helpers: divisors, profile names, bounds."""

from __future__ import annotations

import time

import pytest

from servekit.profiles.schema import divisors, profile_name_problem, safe_profile_name


@pytest.mark.parametrize(
    ("n", "expected"), [(1, [1]), (12, [1, 2, 3, 4, 6, 12]), (49, [1, 7, 49]), (13, [1, 13])]
)
def test_divisors_known_answers(n: int, expected: list[int]) -> None:
    """divisors lists every divisor once, ascending."""
    assert divisors(n) == expected


def test_divisors_of_a_large_prime_are_fast() -> None:
    """A 10^12-sized number takes O(sqrt n) steps, not a loop up to n."""
    started = time.monotonic()
    assert divisors(1_000_000_000_039) == [1, 1_000_000_000_039]
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("name", ["ok", "a.b-c_d", "X1"])
def test_loadable_names(name: str) -> None:
    """Letters, digits, '.', '_' and '-' starting with a letter or digit are profile names."""
    assert profile_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "bad name$(id)", "../x", "x\n", ".hidden", "a/b", "x" * 101])
def test_unloadable_names(name: str) -> None:
    """Names with other characters, a trailing newline or past 100 characters are refused."""
    assert profile_name_problem(name) is not None


@pytest.mark.parametrize(
    ("text", "safe"),
    [("bad name$(id)", "bad-name-id"), ("../../etc/passwd", "etc-passwd"), ("$$", "my-profile")],
)
def test_safe_profile_name(text: str, safe: str) -> None:
    """safe_profile_name turns any text into a loadable name that is never a path."""
    assert safe_profile_name(text) == safe
    assert profile_name_problem(safe) is None
