"""Find, read, merge and validate profile files (shell: reads YAML files).

Every key keeps the file and line it came from, so a bad value or an unknown key
is reported as `file:line: key.path: what is wrong; the fix`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from servekit.errors import ConfigError, ProfileNotFound, UsageError
from servekit.profile_index import BUILTIN_DIR as BUILTIN_DIR
from servekit.profile_index import PROFILE_PATH_ENV as PROFILE_PATH_ENV
from servekit.profile_index import profile_files
from servekit.profiles.schema import Profile, deep_merge, profile_name_problem, safe_profile_name
from servekit.profiles.yaml_files import (
    KeyPath,
    collect_lines,
    one_line,
    parse,
    parse_value,
    read_text,
)


@dataclass(frozen=True, slots=True)
class ProfileRef:
    """Where a named profile lives."""

    name: str
    path: Path
    builtin: bool


@dataclass(slots=True)
class _Located:
    """Plain data from YAML plus the file:line where each key path was written."""

    data: dict[str, Any]
    lines: dict[KeyPath, str] = field(default_factory=dict)
    raw_overrides: dict[KeyPath, str] = field(default_factory=dict)
    # the fix of a problem with the profile as a whole (no one key to correct)
    whole_fix: str = "correct the profile"


def search_dirs(extra: Iterable[str | Path] = ()) -> list[Path]:
    """Return the profile directories in lookup order: given, $SERVEKIT_PROFILE_PATH, built-in."""
    dirs = [Path(d) for d in extra]
    env = os.environ.get(PROFILE_PATH_ENV, "")
    dirs += [Path(d) for d in env.split(os.pathsep) if d]
    return [*dirs, BUILTIN_DIR]


def available_profiles(extra_dirs: Iterable[str | Path] = ()) -> dict[str, ProfileRef]:
    """Return every profile name found, the first directory in lookup order winning."""
    found: dict[str, ProfileRef] = {}
    for directory in search_dirs(extra_dirs):
        if not directory.is_dir():
            continue
        for path in profile_files(directory):
            found.setdefault(path.stem, ProfileRef(path.stem, path, directory == BUILTIN_DIR))
    return found


def check_profile_output(output: Path, *, option: str = "-o") -> None:
    """Refuse a path a new profile cannot be written to and loaded from again.

    Called before the work that produces the profile, so a bad path costs nothing.

    Raises:
        UsageError: the file name is not a profile name with a .yaml/.yml suffix, or its
            directory is missing or not writable.
    """
    shown = one_line(repr(str(output)), 120)
    suffix = output.suffix if output.suffix in {".yaml", ".yml"} else ".yaml"
    problem = profile_name_problem(output.stem)
    if output.suffix != suffix or problem is not None:
        safe = output.with_name(safe_profile_name(output.stem) + suffix)
        reason = problem or "a profile file ends in .yaml or .yml"
        raise UsageError(
            f"{option} {shown} is not a loadable profile file name ({reason})",
            fix=f"use e.g. {option} {one_line(repr(str(safe)), 120)}",
        )
    if not output.parent.is_dir():
        raise UsageError(
            f"{option} {shown}: its directory does not exist",
            fix=f"create the directory first or choose another {option} path",
        )
    if not os.access(output.parent, os.W_OK):
        raise UsageError(
            f"{option} {shown}: its directory is not writable",
            fix=f"choose another {option} path",
        )


def load_profile(
    name_or_path: str,
    *,
    extra_dirs: Iterable[str | Path] = (),
    overrides: Sequence[str] = (),
) -> Profile:
    """Load a profile by name or file path, merge `extends:`, apply overrides, validate.

    Args:
        name_or_path: a profile name, or a path to a YAML file.
        extra_dirs: user profile directories searched before the built-ins.
        overrides: `key.path=value` strings; a bare key means `serve_args.<key>`.

    Raises:
        ProfileNotFound: no such profile; the message lists the available ones.
        ConfigError: invalid YAML, unknown keys or invalid values, with file and line.
        UsageError: a malformed override.
    """
    dirs = list(extra_dirs)
    located = _load_merged(_resolve(name_or_path, dirs), dirs, chain=())
    for override in overrides:
        _apply_override(located, override)
    return _validate(located)


def profile_from_data(
    data: Mapping[str, Any],
    *,
    overrides: Sequence[str] = (),
    fill: Callable[[dict[str, Any]], None] | None = None,
    whole_fix: str | None = None,
) -> Profile:
    """Validate a profile given as data (one `profiles new` built), after `overrides`.

    `fill` runs between the overrides and validation, to compute what depends on them;
    `whole_fix` replaces "correct the profile" as the fix of a problem with the profile as
    a whole (there is no file to correct when the data came from flags).

    Raises:
        ConfigError: unknown keys or invalid values; UsageError: a malformed override.
    """
    located = _Located(data=copy.deepcopy(dict(data)))
    if whole_fix is not None:
        located.whole_fix = whole_fix
    for override in overrides:
        _apply_override(located, override)
    if fill is not None:
        fill(located.data)
    return _validate(located)


def _resolve(name_or_path: str, dirs: list[str | Path]) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in {".yaml", ".yml"} or os.sep in name_or_path:
        if not candidate.is_file():
            what = "is not a regular file" if candidate.exists() else "does not exist"
            raise ProfileNotFound(
                f"profile file {one_line(repr(name_or_path))} {what}",
                fix="give a path to an existing YAML file or a profile name",
            )
        return candidate
    profiles = available_profiles(dirs)
    if name_or_path in profiles:
        return profiles[name_or_path].path
    close = difflib.get_close_matches(name_or_path, list(profiles), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ProfileNotFound(
        f"unknown profile {name_or_path!r}",
        fix=f"{hint}available profiles: {', '.join(sorted(profiles))}",
    )


def _load_merged(path: Path, dirs: list[str | Path], chain: tuple[Path, ...]) -> _Located:
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(p.name for p in (*chain, resolved))
        raise ConfigError(f"{path}: extends forms a cycle ({cycle})", fix="remove one extends")
    own = _read_yaml(path)
    parent_name = own.data.pop("extends", None)
    extends_at = own.lines.get(("extends",), str(path))
    own.lines = {k: v for k, v in own.lines.items() if k[:1] != ("extends",)}
    name = own.data.setdefault("name", path.stem)
    if name != path.stem:
        _name_mismatch(name, path, own.lines.get(("name",), str(path)))
    if parent_name is None:
        return own
    if not isinstance(parent_name, str):
        raise ConfigError(
            f"{extends_at}: extends must be a profile name or a .yaml path",
            fix="write e.g. extends: minimax-m3-mxfp8-8xa800",
        )
    try:
        parent_path = (
            (path.parent / parent_name)
            if parent_name.endswith((".yaml", ".yml"))
            else _resolve(parent_name, [path.parent, *dirs])
        )
        if not parent_path.is_file():
            raise ProfileNotFound(
                f"profile file {str(parent_path)!r} does not exist",
                fix="a .yaml path is relative to the profile's own directory",
            )
    except ProfileNotFound as exc:
        raise ConfigError(f"{extends_at}: extends: {exc.message}", fix=exc.fix) from None
    parent = _load_merged(parent_path, dirs, (*chain, resolved))
    return _Located(
        data=deep_merge(parent.data, own.data),
        lines={**parent.lines, **own.lines},
    )


def _name_mismatch(name: object, path: Path, where: str) -> None:
    """Raise for a profile whose name differs from its file's; untrusted text is escaped."""
    shown = one_line(repr(name), 80)
    stem_ok = profile_name_problem(path.stem) is None
    name_ok = isinstance(name, str) and profile_name_problem(name) is None
    if name_ok:
        fix = (
            f"rename the file to {name}.yaml or set name: {path.stem}"
            if stem_ok
            else (f"rename the file to {name}.yaml")
        )
    else:
        safe = path.stem if stem_ok else safe_profile_name(path.stem)
        fix = f"set name: {safe}" + ("" if stem_ok else f" and rename the file to {safe}.yaml")
    raise ConfigError(
        f"{one_line(where)}: name {shown} differs from the file name {one_line(repr(path.name))}",
        fix=fix,
    )


def _read_yaml(path: Path) -> _Located:
    data, node = parse(read_text(path), str(path))
    if not isinstance(data, dict) or node is None:
        raise ConfigError(
            f"{path}: a profile must be a YAML mapping of keys to values",
            fix="start from servekit profiles show NAME",
        )
    lines: dict[KeyPath, str] = {}
    collect_lines(node, (), path, lines)
    return _Located(data=data, lines=lines)


_TOP_LEVEL = set(Profile.model_fields) | {"validate", "bench"}


def _apply_override(located: _Located, override: str) -> None:
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise UsageError(
            f"--set {override!r} is not key=value", fix="write e.g. --set max_model_len=65536"
        )
    parts: list[str] = key.strip().split(".")
    if parts[0] not in _TOP_LEVEL:
        parts = ["serve_args", *parts]
    at = f"--set {one_line(override)}"
    value: Any = raw
    if parts[0] != "env":  # environment values are strings as written
        value = parse_value(raw, at) if raw.strip() else ""
    target = located.data
    for depth, part in enumerate(parts[:-1], start=1):
        child = target.get(part)
        if not isinstance(child, dict):  # the override replaces what the file had there
            child = {}
            target[part] = child
            _blame(located.lines, tuple(parts[:depth]), at)
        target = child
    target[parts[-1]] = value
    _blame(located.lines, tuple(parts), at)
    located.raw_overrides[tuple(parts)] = raw


def _blame(lines: dict[KeyPath, str], key: KeyPath, at: str) -> None:
    """`key` and everything under it now come from `at`: forget the file's lines there."""
    for known in [k for k in lines if k[: len(key)] == key]:
        del lines[known]
    lines[key] = at


def _validate(located: _Located) -> Profile:
    """Validate; an override parsed as a number/bool/date where text is expected stays text."""
    while True:
        try:
            return Profile.model_validate(located.data)
        except ValidationError as exc:
            retried = False
            for error in exc.errors():
                path = tuple(error["loc"])
                raw = located.raw_overrides.pop(path, None)
                if raw is not None and error["type"] == "string_type":
                    _set_path(located.data, path, raw)
                    retried = True
            if not retried:
                message, fix = _describe(exc, located)
                raise ConfigError(message, fix=fix) from None


def _set_path(data: dict[str, Any], path: KeyPath, value: object) -> None:
    target: Any = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


def _describe(exc: ValidationError, located: _Located) -> tuple[str, str]:
    """The first validation problem as (message, fix), counting the others; one safe line."""
    errors = exc.errors()
    first = errors[0]
    # a dict key's own error is located at (..., key, "[key]"): the key is where it is
    loc: KeyPath = tuple(p for p in first["loc"] if p != "[key]")
    dotted = ".".join(str(p) for p in loc)
    where = _where(loc, located)
    more = len(errors) - 1
    count = f" (+{more} more problem{'s' * (more > 1)})" if more else ""
    message, fix = _problem(first, loc, dotted, located.whole_fix)
    text = f"{where}: {dotted}: {message}" if dotted else f"{where}: {message}"
    return one_line(text + count, _MAX_MESSAGE_CHARS), one_line(fix, _MAX_MESSAGE_CHARS)


_MAX_MESSAGE_CHARS = 1000
_BOUNDS = {
    "greater_than": "a value above",
    "greater_than_equal": "at least",
    "less_than": "a value below",
    "less_than_equal": "at most",
}


def _problem(error: Any, loc: KeyPath, dotted: str, whole_fix: str) -> tuple[str, str]:
    kind = error["type"]
    # a plain dataclass section (servekit.specs) reports an unknown key as an unexpected argument
    if kind in {"extra_forbidden", "unexpected_keyword_argument"}:
        allowed = _allowed_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        return "unknown key", f"did you mean {close[0]}?" if close else (
            f"allowed keys: {', '.join(allowed)}"
        )
    if kind == "missing":
        return "required key is missing", "add it"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    plain = isinstance(value, dict | list) or repr(value) in message
    shown = "" if plain else f" (got {one_line(repr(value), 80)})"
    if kind in _BOUNDS:
        limit = next(iter(error.get("ctx", {}).values()), "the bound")
        return f"{message}{shown}", f"set {dotted} to {_BOUNDS[kind]} {limit}"
    return f"{message}{shown}", f"correct {dotted} there" if dotted else whole_fix


def _where(loc: KeyPath, located: _Located) -> str:
    for end in range(len(loc), 0, -1):
        found = located.lines.get(loc[:end])
        if found:
            return found
    name = located.data.get("name", "profile")
    return f"profile {name}"


def _allowed_keys(loc: KeyPath) -> list[str]:
    section: type = Profile
    for part in loc:
        if isinstance(part, int):
            continue
        types = _field_types(section)
        if isinstance(section, type) and issubclass(section, BaseModel):
            types |= {n: f.annotation for n, f in section.model_fields.items()}
        sub = _section_of(types.get(str(part)))
        if sub is None:
            return []
        section = sub
    return sorted(_field_types(section))


def _field_types(section: type) -> dict[str, Any]:
    """Key (alias where set) -> annotation of a pydantic model or a dataclass section."""
    if isinstance(section, type) and issubclass(section, BaseModel):
        return {f.alias or n: f.annotation for n, f in section.model_fields.items()}
    if not dataclasses.is_dataclass(section):
        return {}
    hints = typing.get_type_hints(section)
    return {f.name: hints[f.name] for f in dataclasses.fields(section)}


def _section_of(annotation: Any) -> type | None:
    if isinstance(annotation, type) and (
        issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation)
    ):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _section_of(arg)
        if found is not None:
            return found
    return None
