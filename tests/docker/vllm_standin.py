"""The docker tier's engine: `vllm serve MODEL FLAGS...` answered by `servekit sim serve`.

It is the base image's ENTRYPOINT, so a container gets exactly what the vllm-openai
image's `vllm serve` would: the model path, then vLLM's flags. The model directory
(mounted read-only from the host, as a real model is) holds `servekit-profile.yaml`, the
deployment to simulate; a directory without it fails as vLLM fails on a missing model,
at once and with exit code 1. `--host` and `--port` are where it listens (host
networking); the other flags are printed and left to the profile.
`SERVEKIT_STANDIN_FAULTS` (comma-separated) passes `--fault` values to the simulator.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 - as vLLM's default
    parser.add_argument("--port", default="8000")
    known, _flags = parser.parse_known_args(argv)
    print(f"vllm stand-in: serve {shlex.join(argv)}", flush=True)
    profile = Path(known.model) / "servekit-profile.yaml"
    if not profile.is_file():
        print(f"ERROR: Invalid repository ID or local directory specified: '{known.model}'",
              file=sys.stderr, flush=True)  # fmt: skip
        return 1
    command = [sys.executable, "-m", "servekit", "sim", "serve", "--profile", str(profile),
               "--host", known.host, "--port", known.port]  # fmt: skip
    for fault in filter(None, os.environ.get("SERVEKIT_STANDIN_FAULTS", "").split(",")):
        command += ["--fault", fault]
    os.execv(command[0], command)  # noqa: S606 - an argument list, no shell
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
