"""The tune tests' engine: `vllm serve MODEL FLAGS...` answered by `servekit sim serve`.

The model directory holds `servekit-profile.yaml`, the deployment to simulate; the flags
the launcher passes (the candidate's settings) become `--set` overrides of it, so each
candidate's engine is simulated with its own max_num_seqs, batch budget, speculation and
chunking, as a real engine would run with them. `--host` and `--port` are where it listens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "max_model_len",
            "tensor_parallel_size", "data_parallel_size", "block_size")  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default="8000")
    parser.add_argument("--speculative-config")
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    for name in SETTINGS:
        parser.add_argument("--" + name.replace("_", "-"))
    known, _ = parser.parse_known_args(argv)
    print(f"vllm stand-in: serve {' '.join(argv)}", flush=True)
    profile = Path(known.model) / "servekit-profile.yaml"
    if not profile.is_file():
        print(f"ERROR: no model at {known.model}", file=sys.stderr, flush=True)
        return 1
    sets = [f"{name}={getattr(known, name)}" for name in SETTINGS if getattr(known, name)]
    if known.enable_chunked_prefill is not None:
        sets.append(f"enable_chunked_prefill={str(known.enable_chunked_prefill).lower()}")
    if known.speculative_config is None:
        sets.append("speculative=null")
    else:
        config = json.loads(known.speculative_config)
        sets.append(f"speculative.config.num_speculative_tokens={config['num_speculative_tokens']}")
        schedule = config.get("num_speculative_tokens_per_batch_size")
        sets.append("speculative.config.num_speculative_tokens_per_batch_size="
                    + (json.dumps(schedule) if schedule else "null"))  # fmt: skip
    command = [sys.executable, "-m", "servekit", "sim", "serve", "--profile", str(profile),
               "--host", known.host, "--port", str(known.port)]  # fmt: skip
    for value in sets:
        command += ["--set", value]
    os.execv(command[0], command)  # noqa: S606 - an argument list, no shell
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if sys.argv[1:2] != ["serve"] else sys.argv[2:]))
