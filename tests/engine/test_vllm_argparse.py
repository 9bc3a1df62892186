"""The `vllm serve` flags servekit renders are accepted by vLLM's own argument parser."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.profiles import available_profiles, load_profile
from servekit.render.argv import host_flags, vllm_serve_args

pytestmark = pytest.mark.vllm
SCRIPT = Path(__file__).with_name("check_vllm_args.py")


def test_every_builtin_profile_parses_with_vllms_parser() -> None:
    """Each built-in profile's argument list parses, and the values arrive as rendered."""
    names = sorted(available_profiles())
    profiles = [load_profile(name) for name in names]
    argvs = [
        [p.model.path, *[w for g in host_flags(p) for w in g], *vllm_serve_args(p)]
        for p in profiles
    ]
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], input=json.dumps(argvs), capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(parsed) == len(profiles)
    for name, profile, values in zip(names, profiles, parsed, strict=True):
        assert "error" not in values, (name, values)
        args = profile.serve_args
        assert values["model_tag"] == profile.model.path
        assert values["host"] == "127.0.0.1"
        assert values["max_model_len"] == args.max_model_len
        assert values["tensor_parallel_size"] == args.tensor_parallel_size
        if args.served_model_name:
            assert args.served_model_name in str(values["served_model_name"])
        if profile.speculative is not None:
            assert "num_speculative_tokens" in str(values["speculative_config"])
