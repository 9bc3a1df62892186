"""Tests of the `vllm serve` argument list built from a profile."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servekit.errors import ConfigError
from servekit.profiles import Profile, load_profile
from servekit.render import vllm_serve_args, vllm_serve_command
from servekit.render.argv import environment, vllm_serve_flags

M3 = "minimax-m3-mxfp8-8xa800"

M3_ARGS = [
    "--block-size", "128",
    "--max-model-len", "131072",
    "--tensor-parallel-size", "8",
    "--max-num-seqs", "128",
    "--max-num-batched-tokens", "4096",
    "--gpu-memory-utilization", "0.99",
    "--served-model-name", "MiniMax-M3-MXFP8",
    "--tool-call-parser", "minimax_m3",
    "--enable-auto-tool-choice",
    "--reasoning-parser", "minimax_m3",
    "--default-chat-template-kwargs", '{"thinking_mode":"enabled"}',
    "--speculative-config",
    '{"method":"eagle3","model":"/models/MiniMax-M3-EAGLE3",'
    '"num_speculative_tokens":3,"attention_backend":"FLASH_ATTN"}',
]  # fmt: skip


def _profile(serve_args: dict[str, Any], **extra: Any) -> Profile:
    """Return a minimal valid profile with the given serve_args."""
    return Profile.model_validate(
        {
            "name": "tiny",
            "model": {"path": "/models/tiny"},
            "hardware": {"gpu": "A800-80GB-SXM", "gpus_per_node": 1},
            "engine": {"image": "vllm/vllm-openai:v0.26.0", "version": "0.26.0"},
            "serve_args": serve_args,
            **extra,
        }
    )


def test_m3_args_are_the_deployments_flags_exactly() -> None:
    """The reference profile renders the deployment's exact flag list, in order."""
    args = vllm_serve_args(load_profile(M3))
    assert args == M3_ARGS


def test_m3_json_args_decode_to_the_deployments_values() -> None:
    """The two JSON flags are single elements that decode to the deployment's dicts."""
    args = vllm_serve_args(load_profile(M3))
    kwargs = json.loads(args[args.index("--default-chat-template-kwargs") + 1])
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert kwargs == {"thinking_mode": "enabled"}
    assert spec == {
        "method": "eagle3",
        "model": "/models/MiniMax-M3-EAGLE3",
        "num_speculative_tokens": 3,
        "attention_backend": "FLASH_ATTN",
    }
    assert list(spec) == ["method", "model", "num_speculative_tokens", "attention_backend"]


def test_command_is_vllm_serve_model_then_flags() -> None:
    """The full command is `vllm serve <model path>`, the loopback host/port, then the flags."""
    command = vllm_serve_command(load_profile(M3))
    assert command == [
        "vllm",
        "serve",
        "/models/MiniMax-M3-MXFP8",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        *M3_ARGS,
    ]


def test_no_eagle3_profile_has_no_speculative_config() -> None:
    """A profile with `speculative: null` renders no --speculative-config."""
    args = vllm_serve_args(load_profile("minimax-m3-mxfp8-8xa800-no-eagle3"))
    assert "--speculative-config" not in args
    assert args == M3_ARGS[:-2]


def test_unset_defaults_are_not_emitted() -> None:
    """Fields the profile did not set (max_num_seqs=256, tp=1, ...) are left to vLLM."""
    args = vllm_serve_args(_profile({"max_model_len": 4096}))
    assert args == ["--max-model-len", "4096"]


def test_explicitly_set_default_value_is_emitted() -> None:
    """A field set to its schema default is still the profile's decision and is rendered."""
    args = vllm_serve_args(_profile({"max_model_len": 4096, "max_num_seqs": 256}))
    assert args == ["--max-model-len", "4096", "--max-num-seqs", "256"]


def test_explicit_null_is_not_emitted() -> None:
    """An optional field set to null renders nothing."""
    args = vllm_serve_args(_profile({"max_model_len": 4096, "block_size": None}))
    assert args == ["--max-model-len", "4096"]


def test_bools_render_as_bare_and_no_flags() -> None:
    """True renders the bare flag, False the `--no-` form."""
    args = vllm_serve_args(
        _profile({"max_model_len": 4096, "enforce_eager": True, "enable_prefix_caching": False})
    )
    assert args == ["--max-model-len", "4096", "--no-enable-prefix-caching", "--enforce-eager"]


@pytest.mark.parametrize(
    ("value", "rendered"),
    [(0.9, "0.9"), (0.99, "0.99"), (0.925, "0.925"), (1.0, "1.0")],
)
def test_floats_render_in_shortest_form(value: float, rendered: str) -> None:
    """Floats render as Python's shortest round-trip repr."""
    args = vllm_serve_args(_profile({"max_model_len": 8, "gpu_memory_utilization": value}))
    assert args[-1] == rendered


def test_extra_args_follow_typed_fields_and_precede_speculative_config() -> None:
    """extra_args render after typed flags, in their written order, before --speculative-config."""
    profile = _profile(
        {
            "max_model_len": 4096,
            "extra_args": {
                "disable-log-requests": True,
                "max_log_len": 100,
                "--override-generation-config": {"temperature": 0.6, "top_k": [1, 2]},
                "enable-log-outputs": False,
                "ignored": None,
            },
        },
        speculative={"config": {"method": "ngram", "num_speculative_tokens": 2}},
    )
    assert vllm_serve_args(profile) == [
        "--max-model-len", "4096",
        "--disable-log-requests",
        "--max-log-len", "100",
        "--override-generation-config", '{"temperature":0.6,"top_k":[1,2]}',
        "--no-enable-log-outputs",
        "--speculative-config", '{"method":"ngram","num_speculative_tokens":2}',
    ]  # fmt: skip


def test_flags_group_one_flag_with_its_value() -> None:
    """Flag groups pair each flag with its value so renderers can put one per line."""
    groups = vllm_serve_flags(
        _profile({"max_model_len": 4096, "enforce_eager": True, "served_model_name": "m"})
    )
    assert groups == [
        ("--max-model-len", "4096"),
        ("--served-model-name", "m"),
        ("--enforce-eager",),
    ]


def test_value_starting_with_dash_is_joined_with_equals() -> None:
    """A string value starting with '-' is written `--flag=value` so argparse cannot misread it."""
    args = vllm_serve_args(_profile({"max_model_len": 8, "served_model_name": "-weird"}))
    assert args == ["--max-model-len", "8", "--served-model-name=-weird"]


@pytest.mark.parametrize(
    "name", ["max-num-seqs", "max_num_seqs", "port", "host", "speculative-config", "model"]
)
def test_extra_args_cannot_override_owned_flags(name: str) -> None:
    """extra_args naming a typed field or a servekit-owned flag is a ConfigError with a fix."""
    profile = _profile({"max_model_len": 8, "extra_args": {name: 1}})
    with pytest.raises(ConfigError, match="instead"):
        vllm_serve_args(profile)


def test_extra_args_rejects_malformed_names() -> None:
    """An extra_args name that is not a flag name (spaces, shell text) is a ConfigError."""
    profile = _profile({"max_model_len": 8, "extra_args": {"a b; rm": 1}})
    with pytest.raises(ConfigError, match="not a vLLM flag name"):
        vllm_serve_args(profile)


def test_environment_is_the_profile_env() -> None:
    """The engine environment is the profile's env mapping."""
    assert environment(load_profile(M3)) == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}


def test_environment_rejects_invalid_names() -> None:
    """An env name that is not a shell variable name is refused when the profile loads."""
    with pytest.raises(ConfigError, match="env name 'A;touch x' is not a valid variable name"):
        load_profile(M3, overrides=["env.A;touch x=1"])
