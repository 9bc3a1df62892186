"""vLLM startup-log reader (core): figures and failure signatures from a log's text.

`parse_startup_log` takes the text of one vLLM server start (stdout and stderr as
captured, any prefixes) and returns what the engine reported: weights, KV-cache
memory and capacity, CUDA-graph memory, and every line that signals a failure.
It reads no files and never raises on malformed input.

Matching is on vLLM's message text (the patterns are `plan.startup_patterns`), never on
the `[file.py:123]` source location, which moves between releases. Lines may carry any
prefix, such as
`(EngineCore_DP0 pid=413) INFO 07-25 10:00:00 [gpu_worker.py:123] ` or
`(VllmWorker TP0 pid=1545) `, and ANSI colour codes, which are removed first.
Numbers may be negative (`-0.53 GiB`) or carry thousands separators (`331,584`).

With tensor parallelism every worker prints its own copy of the per-GPU lines.
The first occurrence of each figure is kept, with two exceptions when ranks
disagree: `weights_gib` keeps the largest value (the fullest GPU is the one that
limits what fits) and `available_kv_gib` keeps the smallest (vLLM sizes the KV
cache of every rank to the smallest one, so that rank bounds capacity).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from servekit.lines import line_starts, matching_lines
from servekit.plan.startup_patterns import (
    ANSI_RE,
    ARCHITECTURE_RE,
    ARGS_GMU_RE,
    AVAILABLE_KV_RE,
    CONCURRENCY_RE,
    DESIRED_GMU_RE,
    ESTIMATED_GRAPH_RE,
    FAILURE_RES,
    FREE_MEMORY_RE,
    GMU_CURRENT_RE,
    GMU_FROM_RE,
    GPU_BLOCKS_RE,
    GRAPH_CAPTURE_RE,
    GRAPH_COUNT_ITEM_RE,
    GRAPH_COUNTS_RE,
    KV_TOKENS_RE,
    LINE_HINTS,
    MAX_LEN_AVAILABLE_RE,
    MAX_LEN_ESTIMATE_RE,
    MAX_LEN_NEEDED_RE,
    MAX_LEN_WINDOW,
    MODEL_LOAD_RE,
    MODEL_RES,
    PROFILING_OFF_RE,
    PROFILING_ON_RE,
    V0_ACTIVATION_RE,
    V0_GMU_RE,
    V0_KV_RE,
    V0_NON_TORCH_RE,
    V1_ACTIVATION_RE,
    V1_NON_TORCH_RE,
    VERSION_RES,
)

__all__ = [
    "MAX_FAILURES",
    "LogFailure",
    "MaxLenShortfall",
    "StartupFigures",
    "StartupLogScanner",
    "is_failure_line",
    "parse_startup_log",
]


@dataclass(frozen=True, slots=True)
class LogFailure:
    """One log line that signals a failed or failing engine.

    Attributes:
        kind: one of `startup_patterns.FAILURE_KINDS`.
        line_no: 1-based line number in the parsed text.
        text: the line with ANSI codes removed and surrounding whitespace stripped.
    """

    kind: str
    line_no: int
    text: str


@dataclass(frozen=True, slots=True)
class MaxLenShortfall:
    """What vLLM said when `max_model_len` did not fit the KV cache.

    Attributes:
        max_seq_len: the model length that did not fit (None if the message had none).
        needed_kv_gib: KV cache one such request needs.
        available_kv_gib: KV cache memory that was available.
        estimated_max_len: the longest model length vLLM estimated would fit.
    """

    max_seq_len: int | None
    needed_kv_gib: float | None
    available_kv_gib: float | None
    estimated_max_len: int | None


@dataclass(frozen=True, slots=True)
class StartupFigures:
    """Figures and failures read from a vLLM startup log; None where the log had none.

    Attributes:
        weights_gib: GPU memory the model weights took (largest across ranks).
        model_load_s: seconds loading the model took.
        available_kv_gib: memory left for the KV cache (smallest across ranks).
        kv_cache_tokens: tokens the KV cache holds.
        max_concurrency: full-length requests the KV cache holds at once.
        concurrency_tokens_per_request: request length `max_concurrency` is quoted for.
        estimated_cuda_graph_gib: CUDA-graph memory the profiler estimated.
        graph_capture_gib: CUDA-graph memory capture actually took.
        graph_capture_s: seconds graph capture took.
        cudagraph_profiling: True if CUDA-graph memory profiling was reported enabled,
            False if reported disabled.
        gpu_memory_utilization: the `--gpu-memory-utilization` the log states (V0's profiling
            sentence, V1's non-default args, DEBUG usage line or CUDA-graph profiling notice).
        total_memory_gib: the device's total memory as vLLM saw it (V0's total_gpu_memory,
            V1's "Free memory on device (free/total GiB)" from 0.11).
        graph_counts: CUDA graphs profiled per mode, e.g. `{"PIECEWISE": 51, "FULL": 35}`.
        max_len_estimate: longest model length vLLM estimated would fit, from a failure.
        max_len_shortfall: the first max-seq-len failure's figures.
        failures: every failure signature, in line order.
        vllm_version: the vLLM version the log reports.
        model: the model path or name the engine loaded.
        architecture: the model class vLLM resolved, e.g. `MiniMaxM3ForCausalLM`.
        gpu_blocks: KV-cache blocks per GPU (V0's "# cuda blocks", V1's DEBUG line).
        activation_peak_gib: the profiled activation peak the log reports (V0's profiling
            sentence, V1's DEBUG usage line; from 0.18 it includes an applied CUDA-graph
            estimate, from 0.27 it is the transient peak only).
        non_torch_gib: the non-torch memory the log reports (V0, V1 0.11-0.26 DEBUG).
    """

    weights_gib: float | None = None
    model_load_s: float | None = None
    available_kv_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_tokens_per_request: int | None = None
    estimated_cuda_graph_gib: float | None = None
    graph_capture_gib: float | None = None
    graph_capture_s: float | None = None
    cudagraph_profiling: bool | None = None
    gpu_memory_utilization: float | None = None
    total_memory_gib: float | None = None
    graph_counts: Mapping[str, int] | None = field(default=None, hash=False)
    max_len_estimate: int | None = None
    max_len_shortfall: MaxLenShortfall | None = None
    failures: tuple[LogFailure, ...] = ()
    vllm_version: str | None = None
    model: str | None = None
    architecture: str | None = None
    gpu_blocks: int | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None

    @property
    def found_any(self) -> bool:
        """True when the log had at least one recognised line (a figure or a failure)."""
        return bool(self.failures) or any(
            getattr(self, f.name) is not None for f in fields(self) if f.name != "failures"
        )


@dataclass(slots=True)
class _Scan:
    """Mutable accumulator private to one `parse_startup_log` call."""

    weights_gib: float | None = None
    model_load_s: float | None = None
    available_kv_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_tokens_per_request: int | None = None
    estimated_cuda_graph_gib: float | None = None
    graph_capture_gib: float | None = None
    graph_capture_s: float | None = None
    cudagraph_profiling: bool | None = None
    gpu_memory_utilization: float | None = None
    total_memory_gib: float | None = None
    graph_counts: dict[str, int] | None = None
    max_len_estimate: int | None = None
    max_len_shortfall: MaxLenShortfall | None = None
    failures: list[LogFailure] = field(default_factory=list)
    vllm_version: str | None = None
    model: str | None = None
    architecture: str | None = None
    gpu_blocks: int | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None


def parse_startup_log(text: str) -> StartupFigures:
    """Read figures and failure signatures from the text of a vLLM startup log.

    Lines end at `\\n`; one trailing `\\r` per line is dropped, so `\\r\\n` text
    parses the same. Any text is accepted; unrecognised lines are ignored.

    Args:
        text: the whole log, as captured.

    Returns:
        The figures found (first occurrence; largest weights and smallest available
        KV across ranks) and every failure line in order with 1-based line numbers
        (the first `MAX_FAILURES` of them).
    """
    scanner = StartupLogScanner()
    scanner.feed(text.split("\n"))
    return scanner.finish()


MAX_FAILURES = 10_000
"""Failure lines kept: a log of nothing but OOM lines must not hold them all in memory."""


class StartupLogScanner:
    """`parse_startup_log` over a log given in batches of lines, in order (a file the
    shell streams), holding only a few lines between batches: a log of any size is read
    in memory bounded by its largest batch.

    Lines are the text between `\\n`s (no `\\n` in them); `finish` after the last batch.
    """

    def __init__(self) -> None:
        self._scan = _Scan()
        self._held: list[str] = []  # cleaned lines not read yet, the first is line _base
        self._base = 0

    def feed(self, lines: Sequence[str]) -> None:
        """Read the next lines of the log."""
        self._held.extend(_clean(raw) for raw in lines)
        # A max-seq-len error reads the lines after it: the last few wait for the next batch.
        self._read_held(len(self._held) - (MAX_LEN_WINDOW - 1))

    def finish(self) -> StartupFigures:
        """The figures of the whole log fed so far."""
        self._read_held(len(self._held))
        return _figures(self._scan)

    def _read_held(self, upto: int) -> None:
        if upto <= 0:
            return
        lines = self._held
        # Only lines some pattern matches are read in turn: most lines of a long log
        # (requests, stats) report nothing, and finding the rest is one C-speed pass per
        # pattern.
        for index in matching_lines(LINE_HINTS, "\n".join(lines), line_starts(lines)):
            if index >= upto:
                break
            _scan_figures(self._scan, lines[index])
            _scan_failures(self._scan, lines, index, self._base)
        del lines[:upto]
        self._base += upto


def is_failure_line(line: str) -> bool:
    """True when a (cleaned) log line holds one of the failure signatures."""
    return any(pattern.search(line) for _, pattern in FAILURE_RES)


def _figures(scan: _Scan) -> StartupFigures:
    return StartupFigures(
        weights_gib=scan.weights_gib,
        model_load_s=scan.model_load_s,
        available_kv_gib=scan.available_kv_gib,
        kv_cache_tokens=scan.kv_cache_tokens,
        max_concurrency=scan.max_concurrency,
        concurrency_tokens_per_request=scan.concurrency_tokens_per_request,
        estimated_cuda_graph_gib=scan.estimated_cuda_graph_gib,
        graph_capture_gib=scan.graph_capture_gib,
        graph_capture_s=scan.graph_capture_s,
        cudagraph_profiling=scan.cudagraph_profiling,
        gpu_memory_utilization=scan.gpu_memory_utilization,
        total_memory_gib=scan.total_memory_gib,
        graph_counts=None if scan.graph_counts is None else MappingProxyType(scan.graph_counts),
        max_len_estimate=scan.max_len_estimate,
        max_len_shortfall=scan.max_len_shortfall,
        failures=tuple(scan.failures),
        vllm_version=scan.vllm_version,
        model=scan.model,
        architecture=scan.architecture,
        gpu_blocks=scan.gpu_blocks,
        activation_peak_gib=scan.activation_peak_gib,
        non_torch_gib=scan.non_torch_gib,
    )


def _clean(raw: str) -> str:
    """Return one line without its trailing carriage return and ANSI escape codes."""
    if raw.endswith("\r"):
        raw = raw[:-1]
    return ANSI_RE.sub("", raw) if "\x1b" in raw else raw


def _to_float(token: str | None) -> float | None:
    """Return a finite float from a matched number, or None."""
    if token is None:
        return None
    try:
        value = float(token.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _to_int(token: str | None) -> int | None:
    """Return an int from a matched number, or None (Python refuses huge digit strings)."""
    if token is None:
        return None
    try:
        return int(token.replace(",", ""))
    except ValueError:
        return None


def _first(current: float | None, new: float | None) -> float | None:
    """Return `current` once set: later ranks' copies of a figure do not replace it."""
    return new if current is None else current


def _scan_figures(scan: _Scan, line: str) -> None:
    """Fold the figures one cleaned line reports into `scan`."""
    if m := MODEL_LOAD_RE.search(line):
        weights = _to_float(m.group(1))
        if weights is not None and (scan.weights_gib is None or weights > scan.weights_gib):
            scan.weights_gib = weights
        scan.model_load_s = _first(scan.model_load_s, _to_float(m.group(2)))
    if m := AVAILABLE_KV_RE.search(line) or V0_KV_RE.search(line):
        available = _to_float(m.group(1))
        if available is not None and (
            scan.available_kv_gib is None or available < scan.available_kv_gib
        ):
            scan.available_kv_gib = available
    if scan.kv_cache_tokens is None and (m := KV_TOKENS_RE.search(line)):
        scan.kv_cache_tokens = _to_int(m.group(1))
    if scan.max_concurrency is None and (m := CONCURRENCY_RE.search(line)):
        scan.concurrency_tokens_per_request = _to_int(m.group(1))
        scan.max_concurrency = _to_float(m.group(2))
    if m := ESTIMATED_GRAPH_RE.search(line):
        scan.estimated_cuda_graph_gib = _first(scan.estimated_cuda_graph_gib, _to_float(m.group(1)))
    if scan.graph_capture_gib is None and (m := GRAPH_CAPTURE_RE.search(line)):
        scan.graph_capture_s = _to_float(m.group(1))
        scan.graph_capture_gib = _to_float(m.group(2))
    _scan_profiling(scan, line)
    _scan_usage(scan, line)
    if scan.graph_counts is None and (m := GRAPH_COUNTS_RE.search(line)):
        counts = {
            mode: count
            for mode, raw in GRAPH_COUNT_ITEM_RE.findall(m.group(1))
            if (count := _to_int(raw)) is not None
        }
        scan.graph_counts = counts or None
    if scan.vllm_version is None:
        for version_re in VERSION_RES:
            if m := version_re.search(line):
                scan.vllm_version = m.group(1).rstrip(".-+")
                break
    if scan.architecture is None and (m := ARCHITECTURE_RE.search(line)):
        scan.architecture = m.group(1)
    if scan.model is None:
        for model_re in MODEL_RES:
            if m := model_re.search(line):
                scan.model = m.group(1)
                break
    if scan.max_len_estimate is None and (m := MAX_LEN_ESTIMATE_RE.search(line)):
        scan.max_len_estimate = _to_int(m.group(1))


def _scan_usage(scan: _Scan, line: str) -> None:
    """Fold KV blocks, the utilization and total memory, and the reported activation and
    non-torch memory."""
    if scan.gpu_blocks is None and (m := GPU_BLOCKS_RE.search(line)):
        scan.gpu_blocks = _to_int(m.group(1) or m.group(2))
    if m := V0_GMU_RE.search(line):
        scan.total_memory_gib = _first(scan.total_memory_gib, _to_float(m.group(1)))
        scan.gpu_memory_utilization = _first(scan.gpu_memory_utilization, _to_float(m.group(2)))
    if m := ARGS_GMU_RE.search(line) or DESIRED_GMU_RE.search(line):
        scan.gpu_memory_utilization = _first(scan.gpu_memory_utilization, _to_float(m.group(1)))
    if m := FREE_MEMORY_RE.search(line):
        scan.total_memory_gib = _first(scan.total_memory_gib, _to_float(m.group(1)))
    if m := V0_ACTIVATION_RE.search(line) or V1_ACTIVATION_RE.search(line):
        scan.activation_peak_gib = _first(scan.activation_peak_gib, _to_float(m.group(1)))
    if m := V0_NON_TORCH_RE.search(line) or V1_NON_TORCH_RE.search(line):
        scan.non_torch_gib = _first(scan.non_torch_gib, _to_float(m.group(1)))


def _scan_profiling(scan: _Scan, line: str) -> None:
    """Fold the CUDA-graph memory profiling notice, and the utilization it quotes."""
    if scan.cudagraph_profiling is not None:
        return
    if PROFILING_ON_RE.search(line):
        scan.cudagraph_profiling = True
        gmu = GMU_CURRENT_RE.search(line) or GMU_FROM_RE.search(line)
    elif PROFILING_OFF_RE.search(line):
        scan.cudagraph_profiling = False
        gmu = GMU_FROM_RE.search(line) or GMU_CURRENT_RE.search(line)
    else:
        return
    if gmu is not None:
        scan.gpu_memory_utilization = _to_float(gmu.group(1))


def _scan_failures(scan: _Scan, lines: list[str], index: int, base: int) -> None:
    """Record every failure kind line `index` (line `base + index` of the log) matches, and
    a max-seq-len shortfall."""
    line = lines[index]
    for kind, pattern in FAILURE_RES:
        m = pattern.search(line)
        if m is None:
            continue
        if len(scan.failures) < MAX_FAILURES:
            scan.failures.append(LogFailure(kind=kind, line_no=base + index + 1, text=line.strip()))
        if kind == "max_len_too_long" and scan.max_len_shortfall is None:
            scan.max_len_shortfall = _read_shortfall(m, lines, index)
            if scan.max_len_estimate is None:
                scan.max_len_estimate = scan.max_len_shortfall.estimated_max_len


def _read_shortfall(match: re.Match[str], lines: list[str], index: int) -> MaxLenShortfall:
    """Read a max-seq-len error's figures from its line and the few that may continue it."""
    # The message is one line in a real log; pasted copies are often wrapped.
    window = " ".join(lines[index : index + MAX_LEN_WINDOW])[match.start() :]
    needed = MAX_LEN_NEEDED_RE.search(window)
    available = MAX_LEN_AVAILABLE_RE.search(window)
    estimate = MAX_LEN_ESTIMATE_RE.search(window)
    return MaxLenShortfall(
        max_seq_len=_to_int(match.group(1)),
        needed_kv_gib=_to_float(needed.group(1) if needed else None),
        available_kv_gib=_to_float(available.group(1) if available else None),
        estimated_max_len=_to_int(estimate.group(1) if estimate else None),
    )
