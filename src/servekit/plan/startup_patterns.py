"""The vLLM startup-log lines servekit reads (core): one regular expression per figure or
failure signature, matched on vLLM's message text (never on the `[file.py:123]` source
location, which moves between releases), and the literal hints that find candidate lines.

`plan.startup_log` folds what these match into `StartupFigures`.
"""

from __future__ import annotations

import re

_INT = r"\d{1,3}(?:,\d{3})+|\d+"
_NUM = rf"-?(?:{_INT})(?:\.\d+)?"
_VERSION = r"v?(\d+\.\d+[\w.+-]*)"
# Lines after a max-seq-len error that may hold the rest of a wrapped message.
MAX_LEN_WINDOW = 4

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")

MODEL_LOAD_RE = re.compile(rf"Model loading took ({_NUM}) GiB(?: memory)? and ({_NUM}) sec")
AVAILABLE_KV_RE = re.compile(rf"Available KV cache memory: ({_NUM}) GiB")
# V0 (worker/worker.py determine_num_available_blocks, up to 0.10.x) has no "Available KV
# cache memory" line: its profiling sentence ends with the KV budget, with no space before GiB.
V0_KV_RE = re.compile(rf"the rest of the memory reserved for KV Cache is ({_NUM}) ?GiB")
V0_GMU_RE = re.compile(
    rf"total_gpu_memory \((?:({_NUM}) ?GiB)?.*?\) x gpu_memory_utilization \(({_NUM})\)"
)
V0_ACTIVATION_RE = re.compile(rf"PyTorch activation peak memory takes ({_NUM}) ?GiB")
V0_NON_TORCH_RE = re.compile(rf"non_torch_memory takes ({_NUM}) ?GiB")
# V1's DEBUG usage line (v1/worker/gpu_worker.py from 0.11.0; 0.27.0 drops the non-torch part).
V1_ACTIVATION_RE = re.compile(rf"({_NUM}) GiB for peak activation")
V1_NON_TORCH_RE = re.compile(rf"({_NUM}) GiB for non-torch memory")
# vLLM names the device: "GPU KV cache size" on CUDA, "CPU KV cache size" on the CPU build,
# "GPU + host KV cache size" with hierarchical sparse attention's host pool (0.32).
KV_TOKENS_RE = re.compile(rf"(?:GPU|CPU|XPU)(?: \+ host)? KV cache size: ({_INT}) tokens")
# V0 executor_base.initialize_cache: "# cuda blocks: N, # CPU blocks: M" (0.8.x names the
# platform; older releases print "# GPU blocks"); V1 loggers.py prints it at DEBUG.
GPU_BLOCKS_RE = re.compile(
    rf"# (?:GPU|cuda|CUDA) blocks: ({_INT})|num_gpu_blocks is: ({_INT})",
)
CONCURRENCY_RE = re.compile(
    rf"Maximum concurrency for ({_INT}) tokens per request: ({_NUM})x",
)
ESTIMATED_GRAPH_RE = re.compile(rf"Estimated CUDA graph memory: ({_NUM}) GiB")
GRAPH_CAPTURE_RE = re.compile(
    rf"Graph capturing finished in ({_NUM}) secs?, took ({_NUM}) GiB",
)
PROFILING_ON_RE = re.compile(r"CUDA graph memory profiling is enabled")
PROFILING_OFF_RE = re.compile(r"CUDA graph memory profiling is disabled")
# V1 states the utilization in the API server's "non-default args" dict (entrypoints, 0.8+)
# and with the device total in gpu_worker.py's DEBUG usage line (0.11+) or its startup error.
ARGS_GMU_RE = re.compile(rf"non-default args: \{{.*?'gpu_memory_utilization': ({_NUM})")
DESIRED_GMU_RE = re.compile(rf"esired GPU memory utilization (?:is )?\(({_NUM}), {_NUM} GiB\)")
FREE_MEMORY_RE = re.compile(rf"Free memory on device(?: \S+)? \({_NUM}/({_NUM}) GiB\)")
GMU_CURRENT_RE = re.compile(rf"--gpu-memory-utilization=({_NUM})")
GMU_FROM_RE = re.compile(rf"--gpu-memory-utilization from ({_NUM})")
GRAPH_COUNTS_RE = re.compile(r"Profiling CUDA graph memory: (.*)")
GRAPH_COUNT_ITEM_RE = re.compile(rf"\b([A-Z][A-Z_]*)=({_INT})")
VERSION_RES = (
    re.compile(rf"vLLM API server version {_VERSION}"),
    # the ASCII-art banner of 0.11+ (entrypoints/utils.py): "... ▀▄▀ █  version 0.19.0"
    re.compile(rf"\u2580\u2584\u2580 \u2588 +version {_VERSION}"),
    re.compile(rf"Starting vLLM API server\b.{{0,200}}?\bversion {_VERSION}"),
    re.compile(rf"Initializing an? (?:V1 )?LLM engine \({_VERSION}\)"),
)
ARCHITECTURE_RE = re.compile(r"Resolved architecture: ([A-Za-z0-9_]+)")
MODEL_RES = (
    re.compile(r"LLM engine \(v[^)\n]*\) with config: model='([^'\n]+)'"),
    re.compile(r"non-default args: \{.*?'model': '([^'\n]+)'"),
)
_MAX_LEN_RE = re.compile(
    rf"To serve at least one request with the model\S* max seq len(?: \(({_INT})\))?",
)
MAX_LEN_NEEDED_RE = re.compile(rf"({_NUM}) GiB KV cache is needed")
MAX_LEN_AVAILABLE_RE = re.compile(rf"available KV cache memory \(({_NUM}) GiB\)")
MAX_LEN_ESTIMATE_RE = re.compile(rf"estimated maximum model length is ({_INT})")

# Order is the order in which kinds found on one line are reported.
FAILURE_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("illegal_memory_access", re.compile(r"illegal memory access", re.IGNORECASE)),
    ("engine_fatal", re.compile(r"EngineCore encountered a fatal error")),
    (
        "worker_died",
        re.compile(r"\b(?:Worker|Engine core) proc\b.{0,200}?\bdied unexpectedly"),
    ),
    ("engine_dead", re.compile(r"\bEngineDeadError\b")),
    ("cuda_oom", re.compile(r"CUDA out of memory|torch(?:\.cuda)?\.OutOfMemoryError")),
    ("max_len_too_long", _MAX_LEN_RE),
    ("no_kv_memory", re.compile(r"No available memory for the cache blocks")),
    (
        "startup_failed",
        re.compile(r"EngineCore failed to start|Engine core initialization failed"),
    ),
)

LINE_RES: tuple[re.Pattern[str], ...] = (
    MODEL_LOAD_RE, AVAILABLE_KV_RE, V0_KV_RE, V0_GMU_RE, V0_ACTIVATION_RE,
    V0_NON_TORCH_RE, V1_ACTIVATION_RE, V1_NON_TORCH_RE, GPU_BLOCKS_RE, ARGS_GMU_RE,
    DESIRED_GMU_RE, FREE_MEMORY_RE,
    KV_TOKENS_RE, CONCURRENCY_RE, ESTIMATED_GRAPH_RE,
    GRAPH_CAPTURE_RE, PROFILING_ON_RE, PROFILING_OFF_RE, GRAPH_COUNTS_RE, *VERSION_RES,
    ARCHITECTURE_RE, *MODEL_RES, MAX_LEN_ESTIMATE_RE, *(p for _, p in FAILURE_RES),
)  # fmt: skip
"""Every pattern tried on each line."""

# Literal text, at least one of which is in every line a pattern of LINE_RES matches (a
# test checks this on every sample log). Literal search skips the rest of a long log at
# memory speed; a leading `\b`, a character class or IGNORECASE would make the regular
# expression engine try every position.
LINE_HINTS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(re.escape(hint))
    for hint in (
        "Model loading took", "Available KV cache memory", "KV cache size: ",
        "rest of the memory reserved for KV Cache", "x gpu_memory_utilization (",
        "activation peak memory takes", "non_torch_memory takes", "for peak activation",
        "for non-torch memory", " blocks: ", "num_gpu_blocks is: ", "\u2580\u2584\u2580 \u2588",
        "Maximum concurrency for", "Estimated CUDA graph memory", "Graph capturing finished",
        "CUDA graph memory profiling is", "Profiling CUDA graph memory", "vLLM API server",
        "LLM engine (", "Resolved architecture", "non-default args",
        "estimated maximum model length", "llegal memory access", "LLEGAL MEMORY ACCESS",
        "EngineCore encountered a fatal error", "died unexpectedly", "EngineDeadError",
        "CUDA out of memory", "OutOfMemoryError", " max seq len",
        "No available memory for the cache blocks", "EngineCore failed to start",
        "Engine core initialization failed", "esired GPU memory utilization",
        "Free memory on device",
    )
)  # fmt: skip

FAILURE_KINDS: tuple[str, ...] = tuple(kind for kind, _ in FAILURE_RES)
"""Every `LogFailure.kind`, in the order kinds on one line are reported."""
