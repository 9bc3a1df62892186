"""The pure judges of validate: garbage, leaked markers, tool-call schemas, check names."""

from __future__ import annotations

import pytest

from servekit.errors import UsageError
from servekit.validate.judge import (
    REASONING_MARKERS,
    TOOL_MARKERS,
    first_difference,
    garbage_reason,
    judge_tool_call,
    leaked_markers,
)
from servekit.validate.prompts import WEATHER_TOOL, ladder_prompt, thinking_off
from servekit.validate.runner import check_names


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("   \n", "empty output"),
        ("ok\x00\x00", "2 NUL byte(s)"),
        ("caf\ufffd\ufffd", "a run of U+FFFD"),
        ("the " * 20, "collapsed repetition ('the' is 20 of 20 words)"),
        ("a b c d e f g h " + "go stop " * 8, "collapsed repetition (ends repeating 'go stop')"),
    ],
)
def test_garbage_is_named(text: str, reason: str) -> None:
    """Each kind of garbage is recognised and named."""
    found = garbage_reason(text)
    assert found is not None
    assert found.startswith(reason)


@pytest.mark.parametrize(
    "text",
    ["Hello there.", "The river bends past a mill, then the town, then the sea.", "caf\ufffd ok",
     "yes yes no maybe later, perhaps tomorrow when the rain stops and the roads dry out"],
)  # fmt: skip
def test_text_is_not_garbage(text: str) -> None:
    """Ordinary answers (a lone U+FFFD included) pass."""
    assert garbage_reason(text) is None


def test_leaked_markers_are_listed() -> None:
    """M3's markers and the common tags are found in content."""
    text = "<mm:think>hmm</mm:think> ]<]minimax[>[<tool_call>"
    assert leaked_markers(text, REASONING_MARKERS) == ["<mm:think>", "</mm:think>"]
    assert leaked_markers(text, TOOL_MARKERS) == ["]<]minimax[>[", "<tool_call>"]
    assert leaked_markers("clean", TOOL_MARKERS) == []


def test_tool_calls_are_judged_against_the_schema() -> None:
    """Name, JSON and the tool's JSON schema are each checked, with the reason."""
    tools = [WEATHER_TOOL]
    assert judge_tool_call("get_weather", '{"city": "Paris"}', tools).ok
    assert "not among ['get_weather']" in judge_tool_call("get_time", "{}", tools).detail
    assert "are not JSON" in judge_tool_call("get_weather", "{city: Paris}", tools).detail
    missing = judge_tool_call("get_weather", '{"unit": "celsius"}', tools)
    assert "'city' is a required property" in missing.detail
    wrong = judge_tool_call("get_weather", '{"city": "Paris", "unit": "kelvin"}', tools)
    assert "at unit" in wrong.detail


def test_thinking_off_flips_the_switch() -> None:
    """'enabled' becomes 'disabled' and true becomes false; other values stay."""
    assert thinking_off({"thinking_mode": "enabled"}) == {"thinking_mode": "disabled"}
    assert thinking_off({"enable_thinking": True, "x": 1}) == {"enable_thinking": False, "x": 1}


def test_ladder_prompts_are_distinct() -> None:
    """Up to 64 ladder prompts are all different."""
    assert len({ladder_prompt(i) for i in range(64)}) == 64


def test_check_names_accept_groups_and_reject_unknown() -> None:
    """--only/--skip take groups and checks, comma-separated or repeated."""
    assert check_names(("ladder,tools", "chat"), "--only") == {"ladder", "tools", "chat"}
    with pytest.raises(UsageError, match="--skip lader: unknown check"):
        check_names(("lader",), "--skip")


def test_first_difference_points_at_the_split() -> None:
    """Divergence reports show where two outputs part."""
    assert first_difference("abcdef", "abcxyz").startswith("differ at character 3")
