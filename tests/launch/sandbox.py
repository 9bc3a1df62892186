"""Launch test sandbox: fake `vllm` and `docker` executables on PATH, and test profiles."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from servekit.runtime.state import group_alive

HERE = Path(__file__).parent


@dataclass(frozen=True)
class LaunchEnv:
    """A sandbox for up/down/status/logs: PATH with fakes, a state dir, a profiles dir."""

    root: Path
    env: dict[str, str]
    state_dir: Path
    profiles_dir: Path

    def servekit(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the servekit CLI in this sandbox."""
        return subprocess.run(
            [sys.executable, "-m", "servekit", *args],
            capture_output=True, text=True, env=self.env, timeout=timeout, check=False,
        )  # fmt: skip

    def profile(self, name: str, port: int, **serve_args: object) -> str:
        """Write a small profile for a one-GPU engine on 127.0.0.1:port; returns its name."""
        document = {
            "name": name,
            "model": {"path": str(self.root / "model")},
            "hardware": {"gpu": "A800-80GB-SXM", "gpus_per_node": 1},
            "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0"},
            "serve_args": {"max_model_len": 2048, "served_model_name": "fake-model",
                           **serve_args},
            "env": {"FAKE_VLLM_ARGV": str(self.root / "vllm-argv.json")},
            "deploy": {"port": port, "bind_host": "127.0.0.1", "startup_timeout_s": 60},
        }  # fmt: skip
        (self.profiles_dir / f"{name}.yaml").write_text(yaml.safe_dump(document))
        return name


def _wrapper(bin_dir: Path, name: str, script: Path) -> None:
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    path.chmod(0o755)


def make_launch_env(tmp_path: Path) -> LaunchEnv:
    """Fake `vllm` and `docker` first on PATH; everything else in tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _wrapper(bin_dir, "vllm", HERE / "fake_vllm.py")
    _wrapper(bin_dir, "docker", HERE / "fake_docker.py")
    (tmp_path / "profiles").mkdir()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SERVEKIT_STATE_DIR": str(tmp_path / "state"),
        "FAKE_DOCKER_CALLS": str(tmp_path / "docker-calls.jsonl"),
        "COLUMNS": "200",
    }
    return LaunchEnv(tmp_path, env, tmp_path / "state", tmp_path / "profiles")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    return group_alive(pgid)


GroupMembers = Callable[[int], list[int]]
