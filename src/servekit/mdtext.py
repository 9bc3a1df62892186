"""Untrusted text as literal Markdown (core): a server's /version, model names, validate
details that quote model output. Inline punctuation is backslash-escaped (CommonMark lets any
ASCII punctuation be), & < > " ' become HTML entities, block markers at a paragraph's start
are escaped, and code is fenced with more backticks than it holds."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

INLINE = re.compile(r"([\\`*_\[\]!|~])")
"""Punctuation that makes Markdown anywhere in a line: escapes, code spans, emphasis, links
and images, table cells, strikethrough (CommonMark lets each be backslash-escaped); & < >
" ' are left to `html.escape`, which turns them into entities."""
BLOCK_START = re.compile(r"^(#{1,6}|[-+=]|\d{1,9}[.)])(?=\s|$|[-=])")
"""What makes a block at a paragraph's start: a heading, a list item, a rule."""


def cell(text: str) -> str:
    """Untrusted text as literal inline Markdown on one line: no link, image, emphasis, code
    span, cell break or HTML."""
    return html.escape(INLINE.sub(r"\\\1", " ".join(text.splitlines())))


def paragraph(text: str) -> str:
    """Untrusted text as one literal paragraph: also no heading, list or rule at its start."""
    line = cell(text).lstrip()
    if match := BLOCK_START.match(line):
        marker = match.group(1)
        return marker[:-1] + "\\" + marker[-1] + line[len(marker) :]
    return line


def fence(code: Sequence[str]) -> str:
    """A backtick fence no line of `code` can close: longer than its longest backtick run."""
    longest = max((len(run) for line in code for run in re.findall(r"`+", line)), default=0)
    return "`" * max(3, longest + 1)
