"""Find, read, merge and validate profile files (shell: reads YAML files).

Every key keeps the file and line it came from, so a bad value or an unknown key
is reported as `file:line: key.path: what is wrong; the fix`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from servekit.errors import ConfigError, ProfileNotFound, UsageError
from servekit.profiles.schema import Profile

BUILTIN_DIR = Path(__file__).parent / "data"
PROFILE_PATH_ENV = "SERVEKIT_PROFILE_PATH"

KeyPath = tuple[str | int, ...]


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
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            found.setdefault(path.stem, ProfileRef(path.stem, path, directory == BUILTIN_DIR))
    return found


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


def _resolve(name_or_path: str, dirs: list[str | Path]) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in {".yaml", ".yml"} or os.sep in name_or_path:
        if not candidate.is_file():
            raise ProfileNotFound(
                f"profile file {name_or_path!r} does not exist",
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
        raise ConfigError(
            f"{own.lines.get(('name',), str(path))}: name {name!r} differs from the file name "
            f"{path.name!r}",
            fix=f"rename the file to {name}.yaml or set name: {path.stem}",
        )
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
        data=_deep_merge(parent.data, own.data),
        lines={**parent.lines, **own.lines},
    )


def _deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML has it (ten times faster than the pure-Python one)."""


def _read_yaml(path: Path) -> _Located:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read profile {path}: {exc.strerror}", fix="check the file's permissions"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start})", fix="save the profile as UTF-8"
        ) from None
    loader = _YamlLoader(text)  # one parse: the nodes keep line numbers, data is built from them
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}", fix="fix the syntax") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict) or node is None:
        raise ConfigError(
            f"{path}: a profile must be a YAML mapping of keys to values",
            fix="start from servekit profiles show NAME",
        )
    lines: dict[KeyPath, str] = {}
    _collect_lines(node, (), path, lines)
    return _Located(data=data, lines=lines)


def _collect_lines(node: yaml.Node, prefix: KeyPath, path: Path, out: dict[KeyPath, str]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            where = f"{path}:{key_node.start_mark.line + 1}"
            if key in seen:
                dotted = ".".join(str(p) for p in (*prefix, key))
                raise ConfigError(f"{where}: {dotted}: duplicate key", fix="keep one of them")
            seen.add(key)
            out[(*prefix, key)] = where
            _collect_lines(value_node, (*prefix, key), path, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out[(*prefix, index)] = f"{path}:{item.start_mark.line + 1}"
            _collect_lines(item, (*prefix, index), path, out)


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
    value: Any = raw
    if parts[0] != "env":  # environment values are strings as written
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
    target = located.data
    for part in parts[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            child = {}
            target[part] = child
        target = child
    target[parts[-1]] = value
    located.lines[tuple(parts)] = f"--set {override}"
    located.raw_overrides[tuple(parts)] = raw


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
    """The first validation problem as (message, fix), counting the others."""
    errors = exc.errors()
    first = errors[0]
    loc: KeyPath = tuple(first["loc"])
    dotted = ".".join(str(p) for p in loc)
    where = _where(loc, located)
    more = len(errors) - 1
    count = f" (+{more} more problem{'s' * (more > 1)})" if more else ""
    # a plain dataclass section (servekit.specs) reports an unknown key as an unexpected argument
    if first["type"] in {"extra_forbidden", "unexpected_keyword_argument"}:
        allowed = _allowed_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        fix = f"did you mean {close[0]}?" if close else f"allowed keys: {', '.join(allowed)}"
        return f"{where}: {dotted}: unknown key{count}", fix
    if first["type"] == "missing":
        return f"{where}: {dotted}: required key is missing{count}", "add it"
    message = str(first["msg"]).removeprefix("Value error, ")
    value = first.get("input")
    shown = "" if isinstance(value, dict | list) else f" (got {value!r})"
    text = f"{where}: {dotted}: {message}{shown}" if dotted else f"{where}: {message}"
    return text + count, f"correct {dotted} there" if dotted else "correct the profile"


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
