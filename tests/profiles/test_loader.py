"""Tests for profile loading, extends merging, overrides and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.errors import ConfigError, ProfileNotFound, UsageError
from servekit.profiles import available_profiles, load_profile

BUILTINS = [
    "minimax-m3-mxfp8-8xa800",
    "minimax-m3-mxfp8-8xa800-no-eagle3",
    "minimax-m3-mxfp8-8xa800-v0251-patched",
    "llama-3.1-70b-4xh100",
    "deepseek-v3-8xh200",
    "minimax-m3-bf16-2x8xa800",
]


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_profiles_validate(name: str) -> None:
    """Every built-in profile loads and validates."""
    assert load_profile(name).name == name


def test_m3_profile_is_the_deployment() -> None:
    """The reference profile holds exactly the deployment's flags and environment."""
    p = load_profile("minimax-m3-mxfp8-8xa800")
    a = p.serve_args
    assert (a.block_size, a.max_model_len, a.tensor_parallel_size) == (128, 131072, 8)
    assert (a.max_num_seqs, a.max_num_batched_tokens, a.gpu_memory_utilization) == (128, 4096, 0.99)
    assert a.served_model_name == "MiniMax-M3-MXFP8"
    assert a.default_chat_template_kwargs == {"thinking_mode": "enabled"}
    assert p.env == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    assert p.engine.image == "vllm/vllm-openai:v0.26.0"
    assert p.speculative is not None
    assert p.speculative.config.model_dump(exclude_none=True) == {
        "method": "eagle3",
        "model": "/models/MiniMax-M3-EAGLE3",
        "num_speculative_tokens": 3,
        "attention_backend": "FLASH_ATTN",
    }


def test_extends_merges_and_overrides() -> None:
    """Variants inherit everything and change only what they state."""
    base = load_profile("minimax-m3-mxfp8-8xa800")
    no_eagle = load_profile("minimax-m3-mxfp8-8xa800-no-eagle3")
    legacy = load_profile("minimax-m3-mxfp8-8xa800-v0251-patched")
    assert no_eagle.speculative is None
    assert no_eagle.serve_args == base.serve_args
    assert legacy.engine.image == "vllm/vllm-openai:v0.25.1"
    assert legacy.engine.patched_image_tag == "vllm/vllm-openai:v0.25.1-m3patch"
    assert legacy.engine.patches[0].url == "https://github.com/vllm-project/vllm/pull/49149.diff"
    assert legacy.speculative == base.speculative


def test_unknown_profile_lists_available() -> None:
    """An unknown name fails with the list of available profiles and a suggestion."""
    with pytest.raises(ProfileNotFound) as info:
        load_profile("minimax-m3-mxfp8-8xa80")
    text = str(info.value)
    assert "unknown profile 'minimax-m3-mxfp8-8xa80'" in text
    assert "did you mean minimax-m3-mxfp8-8xa800" in text
    assert "llama-3.1-70b-4xh100" in text


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(body, encoding="utf-8")
    return path


def test_unknown_key_names_file_line_and_path(tmp_path: Path) -> None:
    """A misspelt key is reported with its file, line, key path and the likely fix."""
    path = _write(
        tmp_path,
        "mine",
        "extends: llama-3.1-70b-4xh100\nname: mine\nserve_args:\n  max_num_seq: 64\n",
    )
    with pytest.raises(ConfigError) as info:
        load_profile(str(path))
    assert str(info.value) == (
        f"{path}:4: serve_args.max_num_seq: unknown key; did you mean max_num_seqs?"
    )


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    """Broken YAML syntax is reported with file and line."""
    path = _write(tmp_path, "bad", "name: bad\nserve_args:\n  max_model_len: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        load_profile(str(path))
    assert str(info.value).startswith(f"{path}:")
    assert "invalid YAML" in str(info.value)


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    """A key written twice is an error instead of a silent overwrite."""
    path = _write(
        tmp_path,
        "dup",
        "extends: llama-3.1-70b-4xh100\nserve_args:\n  max_model_len: 1\n  max_model_len: 2\n",
    )
    with pytest.raises(ConfigError, match=r"dup.yaml:4: serve_args.max_model_len: duplicate key"):
        load_profile(str(path))


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_utilization_outside_range(value: str) -> None:
    """gpu_memory_utilization outside (0, 1] names the value and the fix."""
    with pytest.raises(ConfigError) as info:
        load_profile("llama-3.1-70b-4xh100", overrides=[f"gpu_memory_utilization={value}"])
    text = str(info.value)
    assert text.startswith("--set gpu_memory_utilization=")
    assert f"gpu_memory_utilization {float(value)} is outside (0, 1]" in text


def test_override_sets_nested_and_env_values() -> None:
    """--set reaches serve args by bare key and any section by dotted path."""
    p = load_profile(
        "minimax-m3-mxfp8-8xa800",
        overrides=["max_model_len=65536", "env.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1"],
    )
    assert p.serve_args.max_model_len == 65536
    assert p.env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] == "1"


def test_malformed_override_is_usage_error() -> None:
    """An override without '=' is a usage error."""
    with pytest.raises(UsageError, match="is not key=value"):
        load_profile("llama-3.1-70b-4xh100", overrides=["max_model_len"])


def test_extends_cycle_is_reported(tmp_path: Path) -> None:
    """Profiles that extend each other in a loop fail with the cycle named."""
    _write(tmp_path, "a", "extends: b\n")
    _write(tmp_path, "b", "extends: a\n")
    with pytest.raises(ConfigError, match="extends forms a cycle"):
        load_profile("a", extra_dirs=[tmp_path])


def test_user_directory_profiles_are_listed(tmp_path: Path) -> None:
    """Profiles in a user directory are found and shadow nothing they do not name."""
    _write(tmp_path, "mine", "extends: llama-3.1-70b-4xh100\n")
    found = available_profiles([tmp_path])
    assert not found["mine"].builtin
    assert found["llama-3.1-70b-4xh100"].builtin
    assert load_profile("mine", extra_dirs=[tmp_path]).serve_args.tensor_parallel_size == 4


def test_non_utf8_file_is_one_line_error(tmp_path: Path) -> None:
    """A profile that is not UTF-8 text is a ConfigError naming the file."""
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_profile(str(path))


def test_name_must_match_file_name(tmp_path: Path) -> None:
    """A name: that differs from the file name is refused, so listed names always load."""
    path = _write(tmp_path, "file-stem", "extends: llama-3.1-70b-4xh100\nname: other\n")
    with pytest.raises(ConfigError, match="name 'other' differs from the file name"):
        load_profile(str(path))


def test_missing_parent_names_the_extends_line(tmp_path: Path) -> None:
    """extends: naming a missing profile reports the file and line of the extends key."""
    path = _write(tmp_path, "child", "name: child\nextends: nope-not-here\n")
    with pytest.raises(ConfigError) as info:
        load_profile(str(path))
    assert str(info.value).startswith(f"{path}:2: extends: unknown profile 'nope-not-here'")


@pytest.mark.parametrize("raw", ["123", "yes", "2024-01-01"])
def test_override_keeps_text_for_string_fields(raw: str) -> None:
    """--set of a text field keeps what was written even when YAML would read a number."""
    profile = load_profile("llama-3.1-70b-4xh100", overrides=[f"served_model_name={raw}"])
    assert profile.serve_args.served_model_name == raw


def test_parallel_sizes_must_use_the_gpus() -> None:
    """TP x PP x DP must equal the GPUs the hardware section declares."""
    with pytest.raises(ConfigError, match=r"= 8 GPUs, but hardware has 4"):
        load_profile("llama-3.1-70b-4xh100", overrides=["tensor_parallel_size=8"])


def test_name_mismatch_escapes_and_suggests_a_safe_name(tmp_path: Path) -> None:
    """A hostile name: is shown escaped, and the fix never proposes it as a file name."""
    path = _write(tmp_path, "mine", 'name: "../../etc/x\\e[31mred\\n"\n')
    with pytest.raises(ConfigError) as info:
        load_profile(str(path))
    text = str(info.value)
    assert "\x1b" not in text
    assert "\n" not in text
    assert "\\x1b" in text
    assert info.value.fix == "set name: mine"


def test_name_mismatch_with_an_unsafe_file_name(tmp_path: Path) -> None:
    """A file name that is not a profile name gets a safe name to rename it to."""
    path = _write(tmp_path, "bad name$(id)", "name: other\n")
    with pytest.raises(ConfigError) as info:
        load_profile(str(path))
    assert info.value.fix == "rename the file to other.yaml"
    path = _write(tmp_path, "bad name$(id)", "name: ../x\n")
    with pytest.raises(ConfigError) as info:
        load_profile(str(path))
    assert info.value.fix == "set name: bad-name-id and rename the file to bad-name-id.yaml"


@pytest.mark.parametrize(
    "override",
    [
        'model.architecture={"moe": {"bogus": 1}}',
        "model.path.x=1",
        "serve_args.max_model_len.x=1",
        "env.A$B=1",
    ],
)
def test_nested_override_is_blamed_on_the_set_option(override: str) -> None:
    """A bad nested --set names the --set option, not a line of the built-in profile."""
    with pytest.raises(ConfigError) as info:
        load_profile("minimax-m3-mxfp8-8xa800", overrides=[override])
    assert str(info.value).startswith(f"--set {override}: "), str(info.value)


def test_huge_head_count_is_refused_at_once() -> None:
    """An absurd num_attention_heads is a range error with the value and the bound."""
    with pytest.raises(ConfigError) as info:
        load_profile(
            "minimax-m3-mxfp8-8xa800",
            overrides=["model.architecture.num_attention_heads=1000000000001"],
        )
    assert "(got 1000000000001)" in info.value.message
    assert info.value.fix == "set model.architecture.num_attention_heads to at most 4096"


def test_env_name_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    """An env name ending in a newline is not a variable name ($ must not match before it)."""
    base = "extends: llama-3.1-70b-4xh100\nname: nl\n"
    path = _write(tmp_path, "nl", base + 'env:\n  "FOO\\n": "1"\n')
    with pytest.raises(ConfigError, match="is not a valid variable name"):
        load_profile(str(path))
