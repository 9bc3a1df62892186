#!/usr/bin/env python3
"""A stand-in for `vllm serve` in launch tests: prints a real startup log, then serves /health.

Invoked as `vllm serve MODEL --host H --port P [flags...]` (the `vllm` launcher).
It replays tests/render/data/vllm_cpu_0320_startup.log (a real vLLM CPU start) with
short pauses, spawns a child process like vLLM's engine core (same process group), and
answers /health and /v1/models on loopback until SIGTERM. FAKE_VLLM_MODE=crash prints
the MiniMax-M3 crash log and exits 1 before serving; FAKE_VLLM_MODE=stubborn ignores
SIGTERM (down must escalate to SIGKILL). The value of $SERVEKIT_TEST_SECRET, when set,
is written beside the argv file (`.secret`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
STARTUP = HERE.parent / "render" / "data" / "vllm_cpu_0320_startup.log"
CRASH = HERE.parent / "doctor" / "data" / "m3_v0251_illegal_memory_access.log"


def _arg(name: str, argv: list[str]) -> str:
    return argv[argv.index(name) + 1]


def main() -> int:
    argv = sys.argv[1:]
    assert argv[0] == "serve", argv
    model, host, port = argv[1], _arg("--host", argv), int(_arg("--port", argv))
    served = _arg("--served-model-name", argv) if "--served-model-name" in argv else model
    mode = os.environ.get("FAKE_VLLM_MODE", "")
    Path(os.environ["FAKE_VLLM_ARGV"]).write_text(json.dumps(argv))
    secret = os.environ.get("SERVEKIT_TEST_SECRET")
    if secret is not None:  # what a secret_env variable's engine sees, for the tests
        Path(os.environ["FAKE_VLLM_ARGV"] + ".secret").write_text(secret)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # vLLM's engine core: a child in the same process group, which down must also stop
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    source = CRASH if mode == "crash" else STARTUP
    for line in source.read_text().splitlines():
        if "Application startup complete" in line and mode != "crash":
            break
        print(line, flush=True)
        time.sleep(0.01)
    if mode == "crash":
        return 1

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                body = b""
            elif self.path == "/v1/models":
                body = json.dumps(
                    {
                        "object": "list",
                        "data": [{"id": served, "object": "model", "max_model_len": 2048}],
                    }
                ).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    print("INFO:     Application startup complete.", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
