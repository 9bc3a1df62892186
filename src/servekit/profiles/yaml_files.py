"""Bounded YAML reading for profiles (shell: reads files), keeping each key's line.

A profile is untrusted text: nine lines of nested aliases ("billion laughs") expand to
billions of values, a recursive anchor is an endless structure, and PyYAML's number
constructors are quadratic in the length of a sexagesimal scalar. So a profile is read
with limits: file size, nesting depth, alias uses and the number of values after alias
expansion, all checked on the node tree before any data is built, and a number scalar's
length. Every violation is one `ConfigError` naming the file and line.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from servekit.errors import ConfigError

KeyPath = tuple[str | int, ...]

MAX_PROFILE_BYTES = 1 << 20
"""Largest profile file read (the built-in ones are under 5 KB)."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and sequences (a profile needs about 6)."""
MAX_ALIASES = 100
"""Most alias uses (`*name`) in one document."""
MAX_VALUES = 100_000
"""Most values (keys, scalars, collections) in a document once its aliases are expanded."""
MAX_NUMBER_CHARS = 100
"""Longest scalar read as a number or date (PyYAML's sexagesimal ints are quadratic)."""

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML has it (ten times faster than the pure-Python one)."""


class _ProfileLoader(_BaseLoader):  # type: ignore[misc]
    """The safe loader whose scalar constructors fail as YAML errors, with a length limit."""


def _bounded(
    kind: str, construct: Callable[[Any, yaml.ScalarNode], object], *, limit: int | None
) -> Callable[[Any, yaml.ScalarNode], object]:
    def checked(loader: Any, node: yaml.ScalarNode) -> object:
        text = str(node.value)
        if limit is not None and len(text) > limit:
            raise ConstructorError(
                None, None, f"{kind} of {len(text)} characters is too long", node.start_mark
            )
        try:
            return construct(loader, node)
        except (ValueError, KeyError, IndexError, AttributeError, TypeError, OverflowError):
            # PyYAML's constructors raise these for text an explicit tag cannot convert
            raise ConstructorError(
                None, None, f"{one_line(repr(text))} is not {kind}", node.start_mark
            ) from None

    return checked


for _tag, _kind, _construct, _limit in (
    ("int", "an integer", SafeConstructor.construct_yaml_int, MAX_NUMBER_CHARS),
    ("float", "a number", SafeConstructor.construct_yaml_float, MAX_NUMBER_CHARS),
    ("timestamp", "a date", SafeConstructor.construct_yaml_timestamp, MAX_NUMBER_CHARS),
    ("bool", "a boolean", SafeConstructor.construct_yaml_bool, None),
    ("binary", "a base64 value", SafeConstructor.construct_yaml_binary, None),
):
    _ProfileLoader.add_constructor(
        f"tag:yaml.org,2002:{_tag}", _bounded(_kind, _construct, limit=_limit)
    )


def one_line(text: str, limit: int = 200) -> str:
    """Untrusted text made safe for a one-line message: no control characters, bounded."""
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.split()))
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


def read_text(path: Path) -> str:
    """Read a profile file's text: a regular file of at most `MAX_PROFILE_BYTES`, UTF-8.

    Raises:
        ConfigError: it cannot be read, is not a regular file, is too big or is not UTF-8.
    """
    try:
        # O_NONBLOCK: opening a FIFO named like a profile must not wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ConfigError(
            f"cannot read profile {path}: {exc.strerror or exc}", fix="check the file's permissions"
        ) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ConfigError(
                f"profile {path} is not a regular file", fix="give the path of a profile .yaml file"
            )
        raw = f.read(MAX_PROFILE_BYTES + 1)
    if len(raw) > MAX_PROFILE_BYTES:
        raise ConfigError(
            f"profile {path} is over {MAX_PROFILE_BYTES} bytes, the limit for a profile",
            fix="a profile is a few KB of YAML; start from servekit profiles show NAME",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start})", fix="save the profile as UTF-8"
        ) from None


def parse(text: str, where: str) -> tuple[Any, yaml.Node | None]:
    """Parse one YAML document within the limits; return (data, node tree).

    Args:
        text: the YAML text.
        where: the file named in errors.

    Raises:
        ConfigError: invalid YAML or a limit exceeded, with the line.
    """
    try:
        return _parse(text, where)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark is not None else where
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
        raise ConfigError(
            f"{at}: invalid YAML: {one_line(str(problem))}", fix="fix the syntax"
        ) from None


def parse_value(text: str, where: str) -> Any:
    """A `--set` value as YAML within the limits; text that is not valid YAML stays text.

    Raises:
        ConfigError: the value is valid YAML past a limit (an alias bomb, say).
    """
    try:
        return _parse(text, where)[0]
    except yaml.YAMLError:
        return text


def _parse(text: str, where: str) -> tuple[Any, yaml.Node | None]:
    loader = _ProfileLoader(text)  # one parse: the nodes keep line numbers, data is built from them
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        check_limits(node, where)
        return loader.construct_document(node), node
    except RecursionError:  # the pure-Python composer recurses once per nesting level
        raise ConfigError(
            f"{where}: nesting deeper than {MAX_DEPTH} levels", fix="flatten the profile"
        ) from None
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


def check_limits(root: yaml.Node, where: str) -> None:
    """Refuse recursive aliases, deep nesting, many aliases and large alias expansion.

    A node reached twice is an alias (PyYAML shares the anchored node); the values each
    node stands for after expansion are counted once per node, never by expanding.

    Raises:
        ConfigError: a limit is exceeded; the message names the line.
    """
    expanded: dict[int, int] = {}  # id(node) -> values it stands for once expanded
    on_path: set[int] = set()
    aliases = 0
    # each frame: node, its children still to visit, values counted so far
    stack: list[tuple[yaml.Node, Iterator[yaml.Node], list[int]]] = []

    def line(node: yaml.Node) -> str:
        return f"{where}:{node.start_mark.line + 1}"

    def enter(node: yaml.Node) -> None:
        if len(stack) >= MAX_DEPTH:
            raise ConfigError(
                f"{line(node)}: nesting deeper than {MAX_DEPTH} levels", fix="flatten the profile"
            )
        on_path.add(id(node))
        stack.append((node, _children(node), [1]))

    enter(root)
    while stack:
        node, children, count = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            on_path.discard(id(node))
            expanded[id(node)] = count[0]
            if stack:
                stack[-1][2][0] += count[0]
        elif id(child) in on_path:
            raise ConfigError(
                f"{line(child)}: a recursive alias (an anchor used inside itself)",
                fix="write the values out instead of referring to the anchor",
            )
        elif id(child) in expanded:
            aliases += 1
            count[0] += expanded[id(child)]
            if aliases > MAX_ALIASES:
                raise ConfigError(
                    f"{line(node)}: more than {MAX_ALIASES} alias uses",
                    fix="write the values out instead of using so many aliases",
                )
        else:
            enter(child)
            continue
        if stack and stack[-1][2][0] > MAX_VALUES:
            raise ConfigError(
                f"{line(stack[-1][0])}: aliases expand to more than {MAX_VALUES} values",
                fix="write the values out instead of nesting aliases",
            )


def collect_lines(node: yaml.Node, prefix: KeyPath, path: Path, out: dict[KeyPath, str]) -> None:
    """Record `key path -> file:line` for every key and item; refuse duplicate keys."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            where = f"{path}:{key_node.start_mark.line + 1}"
            if key in seen:
                dotted = one_line(".".join(str(p) for p in (*prefix, key)))
                raise ConfigError(f"{where}: {dotted}: duplicate key", fix="keep one of them")
            seen.add(key)
            out[(*prefix, key)] = where
            collect_lines(value_node, (*prefix, key), path, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out[(*prefix, index)] = f"{path}:{item.start_mark.line + 1}"
            collect_lines(item, (*prefix, index), path, out)
