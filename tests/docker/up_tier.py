"""What the up/status/logs/down tests of the docker tier share: a deployment to launch.

A `Deployment` is one test's engine: a profile made from the tiny CPU benchmark profile
(the base image as its engine, host networking, a free port, a model directory of the
test's own) and the simulated deployment the engine stand-in serves, written to
`<models>/tiny/servekit-profile.yaml`. servekit runs as a subprocess of this checkout's
sources against the tier's private daemon, with its own state directory.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from docker_tier import Daemon

ROOT = Path(__file__).resolve().parents[2]
TINY_PROFILE = ROOT / "benchmarks" / "profiles" / "tiny-llama-cpu.yaml"
COMMAND_TIMEOUT_S = 300.0
"""Bound on one servekit command (the machine is slow and shared)."""
START_TIMEOUT_S = 180
"""Bound on one engine start inside the container (a few seconds when the machine is idle)."""
ERROR_PREFIX = "servekit: error: "


def free_port() -> int:
    """A TCP port nothing listens on now (on loopback, where the engine will bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Deployment:
    """One test's engine: its profile file, model directory, state directory and port.

    Attributes:
        daemon: the private docker daemon.
        image: the engine image.
        root: the test's temporary directory.
        name: the profile's (and container's) name.
        port: where the engine listens (host networking).
        env: the profile's `env`.
        secret_env: the profile's `secret_env`.
        with_model: write the simulated deployment into the model directory (without it
            the engine exits at once, as vLLM does on a missing model).
    """

    daemon: Daemon
    image: str
    root: Path
    name: str
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)
    secret_env: list[str] = field(default_factory=list)
    with_model: bool = True

    @property
    def models(self) -> Path:
        """The host model directory, mounted read-only at /models."""
        return self.root / "models"

    @property
    def state_dir(self) -> Path:
        """servekit's state directory for this test."""
        return self.root / "state"

    @property
    def profile_path(self) -> Path:
        """The profile file `up`, `render`, `validate` and `bench` are given."""
        return self.root / "profiles" / f"{self.name}.yaml"

    @property
    def url(self) -> str:
        """Where the engine answers."""
        return f"http://127.0.0.1:{self.port}"

    def document(self) -> dict[str, Any]:
        """The profile: the tiny CPU benchmark profile run by the tier's image."""
        document: dict[str, Any] = yaml.safe_load(TINY_PROFILE.read_text(encoding="utf-8"))
        document["name"] = self.name
        document["model"]["path"] = "/models/tiny"
        document["engine"]["image"] = self.image
        document["env"] = dict(self.env)
        document["secret_env"] = list(self.secret_env)
        # validate calls tools: the engine needs a tool parser, as vLLM does
        document["serve_args"].update(tool_call_parser="llama3_json", enable_auto_tool_choice=True)
        document["deploy"].update(
            network="host", port=self.port, bind_host="127.0.0.1",
            host_model_dir=str(self.models), container_model_dir="/models",
            startup_timeout_s=START_TIMEOUT_S,
        )  # fmt: skip
        return document

    def write(self) -> Deployment:
        """Write the profile and the model directory; returns self."""
        text = yaml.safe_dump(self.document(), sort_keys=False)
        self.profile_path.parent.mkdir(parents=True, exist_ok=True)
        self.profile_path.write_text(text, encoding="utf-8")
        model = self.models / "tiny"
        model.mkdir(parents=True, exist_ok=True)
        if self.with_model:
            # The loader wants a profile file named after its profile.
            simulated = {**self.document(), "name": "servekit-profile"}
            (model / "servekit-profile.yaml").write_text(
                yaml.safe_dump(simulated, sort_keys=False), encoding="utf-8"
            )
        return self

    def servekit(
        self, *args: str, extra_env: dict[str, str] | None = None,
        timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Run `python -m servekit ARGS` from this checkout against the private daemon."""
        env = self.daemon.env(
            PYTHONPATH=str(ROOT / "src"), SERVEKIT_STATE_DIR=str(self.state_dir),
            COLUMNS="200", **(extra_env or {}),
        )  # fmt: skip
        return subprocess.run(
            [sys.executable, "-m", "servekit", *args], capture_output=True, text=True,
            env=env, timeout=timeout_s, check=False, cwd=self.root,
        )  # fmt: skip

    def inspect(self, ref: str) -> dict[str, Any]:
        """`docker inspect` of one container."""
        found: list[dict[str, Any]] = json.loads(
            self.daemon.cli("inspect", "--type", "container", ref)
        )
        return found[0]

    def state_file(self) -> Path:
        """servekit's state file of this deployment."""
        return self.state_dir / f"{self.name}.json"


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The non-empty lines a command wrote to stderr."""
    return [line for line in result.stderr.splitlines() if line.strip()]


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of servekit's error format a failed command printed (asserted)."""
    lines = error_lines(result)
    assert len(lines) == 1, f"expected one error line, got:\n{result.stderr}"
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]
