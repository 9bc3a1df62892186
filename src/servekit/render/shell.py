"""POSIX shell text from argument lists (core): quoting and line continuation.

Every word goes through `shlex.quote`, so whatever a profile holds (a served
model name with quotes, `;` or `$(...)`) reaches the program as exactly one
argument. Long commands are laid out one flag group per line with ` \\`.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from servekit.render.container import one_line

INDENT = "  "
"""Indent of continuation lines."""

# shellcheck's notes on single-quoted text that looks like an expansion (SC2016) or an
# escaped quote (SC1003), with the characters that draw them. A profile value is quoted
# so that it stays literal, which is what these notes ask about.
_LITERAL_NOTES = {"SC2016": ("$", "`"), "SC1003": ("\\",)}


def quote_words(words: Iterable[str]) -> str:
    """Return words as one line of shell, each quoted only when it needs it.

    Example:
        `quote_words(["--served-model-name", "a b"])` is `--served-model-name 'a b'`.
    """
    return " ".join(shlex.quote(word) for word in words)


def continued(lines: Sequence[str]) -> str:
    """Return pre-rendered shell lines joined into one command with ` \\` continuations."""
    return " \\\n".join(lines)


def command_lines(head: Sequence[str], groups: Iterable[Sequence[str]]) -> list[str]:
    """Return the lines of one command: the head words, then one indented line per group.

    Args:
        head: the words of the first line, e.g. `["vllm", "serve", "/models/m"]`.
        groups: the following words, one line per group (a flag with its value).
    """
    return [quote_words(head), *(INDENT + quote_words(group) for group in groups)]


def assignment(name: str, value: str) -> str:
    """Return `NAME=value` with the value quoted; the name must already be a valid name."""
    return f"{name}={shlex.quote(value)}"


def literal_values_directive(words: Iterable[str]) -> list[str]:
    """Return the shellcheck directive for a command whose quoted values look like shell.

    A value such as `$(id)` or `a \\` is single-quoted so that it reaches the program
    as written; shellcheck notes such text in case an expansion was meant. The directive
    (one comment line, for the next command only) names just the notes the words draw;
    words that draw none give no line.

    Example:
        `literal_values_directive(["--served-model-name", "a$b"])` is
        `["# shellcheck disable=SC2016 # quoted profile values are literal"]`.
    """
    values = list(words)
    codes = [
        code
        for code, chars in _LITERAL_NOTES.items()
        if any(char in value for value in values for char in chars)
    ]
    if not codes:
        return []
    return [f"# shellcheck disable={','.join(sorted(codes))} # quoted profile values are literal"]


def comments(lines: Iterable[str]) -> list[str]:
    """Return each text as a `# ` comment line that cannot break out of the comment."""
    return [f"# {one_line(line)}".rstrip() for line in lines]
