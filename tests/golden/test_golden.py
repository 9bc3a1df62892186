"""Behaviour does not change (issue #29): the same options give the same records, summaries,
plans, tune documents and launch artifacts as before the refactor.

Every command of `golden_cases.CASES` (sim run's closed and open loops, sessions, agent loops
and trace replays at fixed seeds; tune in simulation; plan; render) is run with this tree's
servekit in a subprocess, and its stdout and files, normalised, must equal `data/CASE.json`,
taken at 4d6e1a1 before the refactor by `make_golden.py` (which says when, and only when,
they may be written again). What two runs of one tree differ in (wall-clock stamps, real
seconds, servekit's version, the temporary directory, the hash order of tune's tied Pareto
points) is normalised in `golden_cases`; every simulated figure is compared exactly.
About 20 s in all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from golden_cases import CASES, DATA, ROOT, Case, dumps, golden_path, run_case

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MAX_SHOWN = 20


def differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where `actual` differs from `expected`: one line per differing value, by path."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in expected.keys() | actual.keys():
            here = f"{where}.{key}"
            if key not in actual:
                out.append(f"{here}: missing (was {json.dumps(expected[key])[:120]})")
            elif key not in expected:
                out.append(f"{here}: new (is {json.dumps(actual[key])[:120]})")
            else:
                out += differences(expected[key], actual[key], here)
        return sorted(out)
    if isinstance(expected, list) and isinstance(actual, list):
        out = [] if len(expected) == len(actual) else [
            f"{where}: {len(actual)} items, was {len(expected)}"
        ]  # fmt: skip
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            out += differences(e, a, f"{where}[{i}]")
        return out
    if type(expected) is not type(actual) or expected != actual:
        return [f"{where}: {json.dumps(actual)[:120]}, was {json.dumps(expected)[:120]}"]
    return []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_outputs_equal_the_golden_ones(case: Case, tmp_path: Path) -> None:
    """Values first (a readable list of what moved), then the text: key order and number
    types (1 against 1.0) are output too."""
    golden = golden_path(case)
    text = golden.read_text(encoding="utf-8")
    result = run_case(case, ROOT / "src", tmp_path)
    diffs = differences(json.loads(text), result)
    shown = "\n".join(diffs[:MAX_SHOWN]) + (f"\n... {len(diffs)} in all" if diffs else "")
    assert not diffs, f"{case.name} differs from {golden.name}:\n{shown}"
    assert dumps(result) == text, f"{case.name}: same values, but key order or types differ"


def test_every_case_has_its_golden_file_and_no_other() -> None:
    """A new case needs its golden file from the base commit; a removed case, its file gone."""
    stored = {p.name for p in DATA.glob("*.json")}
    assert stored == {golden_path(c).name for c in CASES}
    assert len({c.name for c in CASES}) == len(CASES)


def test_the_comparison_names_what_moved() -> None:
    """A changed, a missing and a retyped value are each named by their path."""
    expected = {"points": [{"end_ns": 5, "ttft_ms": 1.0}], "seed": 1}
    actual = {"points": [{"end_ns": 6, "ttft_ms": 1}]}
    assert differences(expected, actual) == [
        ".points[0].end_ns: 6, was 5",
        ".points[0].ttft_ms: 1, was 1.0",
        ".seed: missing (was 1)",
    ]
