"""`servekit up / status / down` against the real vLLM engine (CPU build).

The profile serves the tier's tiny M3-style model with the process runtime and the
`python -m vllm.entrypoints.openai.api_server` launcher. up must show the real stages,
print the capacity vLLM reports, and down must leave no process of the group behind.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from servekit.runtime.state import group_alive, read_state

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / ".artifacts" / "engine"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_up_status_down_with_real_vllm(target_model: Path, tmp_path: Path) -> None:
    """The issue's must-show: up follows the real stages to ready and prints the KV
    capacity; status reports health, the served model and uptime; down stops the API
    server, engine core and workers, leaving no process behind."""
    profile = {
        "name": "tiny-m3-cpu",
        "description": "the real-engine tier's tiny model on vLLM's CPU build",
        "model": {"path": str(target_model)},
        "hardware": {"gpu": "A800-80GB-SXM", "gpus_per_node": 1},
        "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0"},
        "serve_args": {
            "max_model_len": 2048, "max_num_seqs": 8, "served_model_name": "tiny-m3",
            "dtype": "float32", "reasoning_parser": "minimax_m3",
            "extra_args": {"seed": 0},
        },
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "auto",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
        "deploy": {"port": _free_port(), "bind_host": "127.0.0.1", "startup_timeout_s": 420},
    }  # fmt: skip
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "tiny-m3-cpu.yaml").write_text(yaml.safe_dump(profile))
    state_dir = tmp_path / "state"
    env = {**os.environ, "SERVEKIT_STATE_DIR": str(state_dir), "COLUMNS": "200"}

    def servekit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servekit", *args, "--profiles-dir",
                               str(profiles)], capture_output=True, text=True, env=env,
                              timeout=600, check=False)  # fmt: skip

    up = servekit("up", "tiny-m3-cpu", "--launcher", "module")
    state = read_state(state_dir, "tiny-m3-cpu")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "servekit-up.out").write_text(up.stdout + up.stderr)
    assert state is not None
    assert state.pid is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        stages = re.findall(r"\[\s*([\d.]+) s\] (.+)", up.stdout)
        labels = [label for _, label in stages]
        assert labels == ["loading weights", "profiling memory and compiling",
                          "sizing the KV cache", "API server up"], up.stdout  # fmt: skip
        assert re.search(r"KV capacity: [\d,]+ tokens, max concurrency [\d.]+x at 2,048", up.stdout)
        assert "serving tiny-m3" in up.stdout
        assert state.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert len(group_alive(state.pid)) >= 2  # API server and engine core

        status = servekit("status", "tiny-m3-cpu", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        document = json.loads(status.stdout)
        assert document["health"] == 200
        assert document["served_model"] == "tiny-m3"
        assert document["max_model_len"] == 2048
        assert document["uptime_s"] > 0
    finally:
        down = servekit("down", "tiny-m3-cpu")
        (ARTIFACTS / "servekit-down.out").write_text(down.stdout + down.stderr)
    assert down.returncode == 0, down.stderr
    assert group_alive(state.pid) == []
    assert read_state(state_dir, "tiny-m3-cpu") is None
    log = Path(state.log_path)
    assert "Resolved architecture" in log.read_text()
