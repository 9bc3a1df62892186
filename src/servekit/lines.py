"""Which lines of a text a pattern matches, found by scanning the whole text (core).

Per-line matching runs the regular-expression engine once per line and pattern, which for
a day-long engine log (hundreds of thousands of lines) costs seconds in interpreter
overhead. Searching the whole text once per pattern stays in C, and the few match
positions are mapped back to line numbers. Patterns must not match across a line break
(`.` does not, and patterns here avoid `\\s` and negated classes without `\\n`).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate

__all__ = ["line_starts", "matching_lines"]


def line_starts(lines: Sequence[str]) -> list[int]:
    """Offsets at which each line starts in `"\\n".join(lines)`."""
    return [0, *accumulate(len(line) + 1 for line in lines[:-1])]


def matching_lines(
    patterns: Iterable[re.Pattern[str]], text: str, starts: Sequence[int]
) -> list[int]:
    """Sorted 0-based indexes of the lines in which any pattern matches.

    Args:
        patterns: compiled patterns that never span a line break.
        text: the lines joined by `\\n`.
        starts: `line_starts` of those lines.
    """
    found: set[int] = set()
    for pattern in patterns:
        last = -1
        for match in pattern.finditer(text):
            index = bisect_right(starts, match.start()) - 1
            if index != last:
                found.add(index)
                last = index
    return sorted(found)
