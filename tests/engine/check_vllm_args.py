"""Parse rendered `vllm serve` argument lists with vLLM's own parser (run as a script).

Reads a JSON list of argument lists on stdin; prints one JSON object per list with the
parsed values servekit cares about, or the parser's error. Run in its own process so that
importing vLLM cannot disturb the test process.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser

KEYS = ("model_tag", "host", "port", "max_model_len", "block_size", "tensor_parallel_size",
        "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
        "served_model_name", "tool_call_parser", "reasoning_parser", "enable_auto_tool_choice",
        "default_chat_template_kwargs", "speculative_config", "enable_expert_parallel",
        "trust_remote_code", "kv_cache_dtype", "language_model_only")  # fmt: skip

for argv in json.load(sys.stdin):
    parser = make_arg_parser(FlexibleArgumentParser())
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
        validate_parsed_serve_args(args)
    except SystemExit:
        print(json.dumps({"error": err.getvalue().strip().splitlines()[-1:]}))
        continue
    except Exception as exc:  # report the parser's verdict, whatever it is
        print(json.dumps({"error": [f"{type(exc).__name__}: {exc}"]}))
        continue
    values = {k: getattr(args, k) for k in KEYS if hasattr(args, k)}
    print(json.dumps(values, default=str))
