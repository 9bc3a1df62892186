"""The real-engine tier: vLLM (CPU build) serving tiny models built by `tiny_model.py`.

Servers are started with `python -m vllm.entrypoints.openai.api_server` on 127.0.0.1 and a
free port, in their own process group, and stopped by that id when their test module ends
(one server variant per module keeps memory and CPU bounded on a 2-core machine). Each
server's log is kept in `.artifacts/engine/` and its tail is attached to every failing
test that used it. Tiny models are cached in `.cache/tiny-models/` by a hash of the
builder's source, so a second local run skips the training; CI starts clean.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / ".artifacts" / "engine"
CACHE = ROOT / ".cache" / "tiny-models"
BUILDER = Path(__file__).with_name("tiny_model.py")
SERVED = "tiny-m3"
MAX_MODEL_LEN = 2048
START_TIMEOUT_S = 420.0
CLIENT_CORE = 0
SERVER_CORE = 1
# Timing servers run without prefix caching: bench's synthetic prompts from the tiny
# vocabulary share whole 128-token blocks, so hits would depend on the draw.
MEASURED_FLAGS = ["--no-enable-prefix-caching"]
PARSERS = ["--reasoning-parser", "minimax_m3", "--tool-call-parser", "minimax_m3",
           "--enable-auto-tool-choice"]  # fmt: skip
PROMPT_DETAILS = "--enable-prompt-tokens-details"  # usage reports cached prompt tokens
TRAFFIC_FLAGS = [*PARSERS, "--enable-prefix-caching", PROMPT_DETAILS]


@dataclass
class VllmServer:
    """A running vLLM server of the tier."""

    variant: str
    url: str
    log: Path
    proc: subprocess.Popen[bytes]
    start_s: float
    model_dir: Path

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the server's log."""
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def build_model(kind: str) -> Path:
    """Build (or reuse from the cache) a tiny model: `target`, a `draft-rand` with other
    weights, or `cjk-rand` (random weights, a Chinese-trained vocabulary). The cache key
    covers the builder's source, so a changed recipe rebuilds."""
    digest = hashlib.sha256(BUILDER.read_bytes()).hexdigest()[:12]
    out = CACHE / f"{kind}-{digest}"
    if (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    done = subprocess.run([sys.executable, str(BUILDER), str(tmp), "--kind", kind],
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"building the tiny {kind} model failed:\n{done.stderr[-3000:]}")
    tmp.rename(out)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:  # noqa: S310 - loopback
            return int(resp.status)
    except OSError:
        return None


def start_vllm(
    variant: str, model_dir: Path, extra: list[str], *, core: int | None = None
) -> VllmServer:
    """Start one server and wait for /health 200 (failing with the log tail if it dies).

    With `core`, the API server, engine core and its OpenMP threads are pinned to that
    core (timing measurements keep the clients on the other one).
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = ARTIFACTS / f"vllm-{variant}.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "auto",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    if core is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    cmd = [
        *([] if core is None else ["taskset", "-c", str(core)]),
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--dtype",
        "float32",
        "--seed",
        "0",
        *extra,
    ]
    start = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    server = VllmServer(variant, f"http://127.0.0.1:{port}", log, proc, 0.0, model_dir)
    while _health(server.url) != 200:
        if proc.poll() is not None or time.monotonic() - start > START_TIMEOUT_S:
            stop_vllm(server)
            raise AssertionError(f"vLLM ({variant}) did not start:\n{server.log_tail()}")
        time.sleep(1.0)
    server.start_s = time.monotonic() - start
    with (ARTIFACTS / "start-times.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"variant": variant, "start_s": round(server.start_s, 1)}) + "\n")
    return server


def stop_vllm(server: VllmServer) -> None:
    """Stop the server's whole process group (the API server and its engine core)."""
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, signal.SIGTERM)
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def target_model() -> Path:
    """The tiny target model (trained to speak M3's reasoning and tool-call syntax)."""
    return build_model("target")


@pytest.fixture(scope="session")
def cjk_model() -> Path:
    """Untrained weights over a byte-level vocabulary trained with Chinese text: greedy
    output holds tokens that decode to nothing (special tokens, parts of characters)."""
    return build_model("cjk-rand")


@pytest.fixture(scope="session")
def draft_rand_model() -> Path:
    """A draft with other weights than the target: it proposes tokens the target rejects."""
    return build_model("draft-rand")


def _serve(
    variant: str, model_dir: Path, extra: list[str], core: int | None = None
) -> Iterator[VllmServer]:
    server = start_vllm(variant, model_dir, extra, core=core)
    try:
        yield server
    finally:
        stop_vllm(server)


def spec_config(draft: Path) -> list[str]:
    """`--speculative-config` for draft-model speculation with 3 tokens."""
    config = {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 3}
    return ["--speculative-config", json.dumps(config)]


@pytest.fixture(scope="module")
def vllm_plain(target_model: Path) -> Iterator[VllmServer]:
    """The target with M3's reasoning and tool parsers, no speculation."""
    yield from _serve("plain", target_model, PARSERS)


@pytest.fixture(scope="module")
def vllm_measured(target_model: Path) -> Iterator[VllmServer]:
    """The target for timing comparisons: pinned to its own core, prefix caching off (the
    tiny vocabulary makes vLLM's random prompts share 128-token blocks, which would give
    one tool's prompts cache hits the other's do not get)."""
    yield from _serve("measured", target_model, MEASURED_FLAGS, core=SERVER_CORE)


@pytest.fixture(scope="module")
def vllm_traffic(target_model: Path) -> Iterator[VllmServer]:
    """The target for real traffic (sessions, trace replay, agent loops): M3's parsers,
    prefix caching on, usage with `prompt_tokens_details.cached_tokens`, pinned to its own
    core (turn 2's TTFT is set against a cold prompt's)."""
    yield from _serve("traffic", target_model, TRAFFIC_FLAGS, core=SERVER_CORE)


@pytest.fixture(scope="module")
def vllm_traffic_off(target_model: Path) -> Iterator[VllmServer]:
    """The target with prefix caching off (and cached tokens still asked for in usage)."""
    yield from _serve("traffic-off", target_model, [*MEASURED_FLAGS, PROMPT_DETAILS])


@pytest.fixture(scope="module")
def vllm_cjk(cjk_model: Path) -> Iterator[VllmServer]:
    """The random CJK model for token counting: pinned to its own core, prefix caching off,
    no parsers."""
    yield from _serve("cjk", cjk_model, MEASURED_FLAGS, core=SERVER_CORE)


@pytest.fixture(scope="module")
def vllm_wrong_parsers(target_model: Path) -> Iterator[VllmServer]:
    """The same target started without M3's parsers (the misconfiguration validate catches)."""
    yield from _serve("wrong-parsers", target_model, [])


@pytest.fixture(scope="module")
def vllm_spec_equal(target_model: Path) -> Iterator[VllmServer]:
    """Draft-model speculation with a draft equal to the target (accepts every token)."""
    yield from _serve("spec-equal", target_model, [*PARSERS, *spec_config(target_model)])


@pytest.fixture(scope="module")
def vllm_spec_rand(target_model: Path, draft_rand_model: Path) -> Iterator[VllmServer]:
    """Draft-model speculation with a differently trained draft (accepts few tokens)."""
    yield from _serve("spec-rand", target_model, [*PARSERS, *spec_config(draft_rand_model)])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the log tail of every vLLM server a failing test used."""
    report = yield
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, VllmServer):
                report.sections.append((f"vLLM {value.variant} log tail", value.log_tail()))
    return report
