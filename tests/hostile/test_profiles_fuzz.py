"""Fuzz the profile loader: any text, bytes, YAML-shaped noise, mutated profiles or --set
overrides give a Profile or one ServekitError, never another exception, in bounded time and
memory; and one hostile file never breaks `profiles list` for the others."""

from __future__ import annotations

import json
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servekit.cli.main import cli
from servekit.errors import ServekitError
from servekit.profiles import Profile, load_profile
from servekit.profiles.loader import BUILTIN_DIR

BASE = "llama-3.1-70b-4xh100"
BASE_TEXT = (BUILTIN_DIR / f"{BASE}.yaml").read_text(encoding="utf-8")
SECONDS_PER_INPUT = 5.0  # generous for a loaded CI machine; a bomb takes hours, not seconds
PEAK_BYTES = 64 << 20  # Python memory one load may take; the 17 GB bomb is far past it

FUZZ = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# pieces of YAML that exercise anchors, aliases, merges, tags, flow and block nesting
TOKENS = [
    "&a ", "*a", "&b ", "*b", "<<: ", "!!int ", "!!float ", "!!bool ", "!!timestamp ",
    "!!binary ", "!!set ", "!!omap ", "!!python/object:os.system ", "? ", ": ", "- ", "[", "]",
    "{", "}", ", ", "\n", "\n  ", "\n    ", "'", '"', "#", "|", ">", "---\n", "...\n",
    "%YAML 1.1\n",
    "name", "model", "serve_args", "architecture", "num_attention_heads", "env", "extends",
    "1", "-1", "0x_", "1:2:3", "2026-02-30", "1e999", ".nan", "~", "null", "yes", "\t", "\x00",
    "\x1b[31m", "\u2028", "\ufeff", "é", "💥",
]  # fmt: skip


@contextmanager
def bounded() -> Iterator[None]:
    """Fail when the body takes more than SECONDS_PER_INPUT or PEAK_BYTES of Python memory."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        yield
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.monotonic() - started < SECONDS_PER_INPUT
    assert peak < PEAK_BYTES, peak


def load_text(data: str | bytes, *, name: str = "fuzz", overrides: tuple[str, ...] = ()) -> None:
    """Write data as NAME.yaml and load it: a Profile or a ServekitError, nothing else."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"{name}.yaml"
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8", errors="surrogatepass")
        error: ServekitError | None = None
        try:
            assert isinstance(load_profile(str(path), overrides=overrides), Profile)
        except ServekitError as exc:
            error = exc
    if error is not None:  # one line with a fix, as the CLI prints it
        assert "\n" not in str(error)
        assert error.fix


@FUZZ
@given(st.text(max_size=2000))
def test_any_text(text: str) -> None:
    """Any text is a profile or one ServekitError."""
    with bounded():
        load_text(text)


@FUZZ
@given(st.binary(max_size=2000))
def test_any_bytes(data: bytes) -> None:
    """Any bytes (not UTF-8, NUL, BOMs) are a profile or one ServekitError."""
    with bounded():
        load_text(data)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=120))
def test_yaml_shaped_noise(tokens: list[str]) -> None:
    """Random anchors, aliases, tags and nesting are a profile or one ServekitError."""
    with bounded():
        load_text("".join(tokens))


@FUZZ
@given(
    st.integers(0, len(BASE_TEXT)),
    st.integers(0, 40),
    st.lists(st.sampled_from(TOKENS), max_size=8),
)
def test_mutated_profile_text(at: int, cut: int, inserted: list[str]) -> None:
    """A valid profile with a span cut and YAML pieces inserted is a profile or one error."""
    with bounded():
        load_text(BASE_TEXT[:at] + "".join(inserted) + BASE_TEXT[at + cut :], name=BASE)


def leaf_paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a nested dict/list document."""
    paths = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            paths += leaf_paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            paths += leaf_paths(value, (*prefix, index))
    return paths


BASE_DATA = yaml.safe_load(BASE_TEXT)
PATHS = leaf_paths(BASE_DATA)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from([10**30, -(10**30), 2**63, 1_000_000_000_001]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@FUZZ
@given(st.sampled_from(PATHS), VALUES)
def test_mutated_profile_value(path: tuple[Any, ...], value: Any) -> None:
    """A valid profile with any one value replaced is a profile or one ServekitError."""
    data = json.loads(json.dumps(BASE_DATA))
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with bounded():
        load_text(yaml.safe_dump(data, allow_unicode=True), name=BASE)


@FUZZ
@given(
    st.lists(st.sampled_from([p for p in PATHS if all(isinstance(k, str) for k in p)]), max_size=3),
    st.lists(
        st.text(max_size=40) | st.sampled_from(["".join(t) for t in (TOKENS[:6], TOKENS[14:20])]),
        max_size=3,
    ),
)
def test_any_set_overrides(keys: list[tuple[str, ...]], raws: list[str]) -> None:
    """--set KEY=VALUE with any value (YAML noise included) is a profile or one error."""
    overrides = tuple(f"{'.'.join(k)}={v}" for k, v in zip(keys, raws, strict=False))
    with bounded():
        load_text(BASE_TEXT, name=BASE, overrides=overrides)


@FUZZ
@given(st.text(max_size=60), st.text(max_size=60))
def test_any_set_text(key: str, raw: str) -> None:
    """Arbitrary --set text is a profile or one ServekitError."""
    with bounded():
        load_text(BASE_TEXT, name=BASE, overrides=(f"{key}={raw}",))


def billion_laughs() -> str:
    """The nine-line alias bomb of the issue (17 GB once expanded)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_bomb_is_bounded() -> None:
    """The nine-line bomb is refused within the time and memory bounds."""
    with bounded():
        load_text(billion_laughs())


def test_profiles_list_survives_hostile_files(tmp_path: Path) -> None:
    """A bomb, a recursive anchor and deep nesting are listed as invalid; the rest still list."""
    (tmp_path / "bomb.yaml").write_text(billion_laughs())
    (tmp_path / "loop.yaml").write_text("a: &a [*a]\n")
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 500 + "]" * 500 + "\n")
    (tmp_path / "good.yaml").write_text(f"extends: {BASE}\nname: good\n")
    with bounded():
        result = CliRunner().invoke(
            cli, ["profiles", "list", "--profiles-dir", str(tmp_path), "--json"]
        )
    assert result.exit_code == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)["profiles"]}
    assert "aliases expand to more than" in rows["bomb"]["error"]
    assert "recursive alias" in rows["loop"]["error"]
    assert "nesting deeper than" in rows["deep"]["error"]
    assert "error" not in rows["good"]
    assert "error" not in rows[BASE]
