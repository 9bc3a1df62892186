"""Tests for servekit.plan.startup_log: figures and failures from vLLM startup logs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servekit.plan.startup_log import (
    LogFailure,
    MaxLenShortfall,
    StartupFigures,
    parse_startup_log,
)
from servekit.plan.startup_patterns import FAILURE_KINDS

DATA = Path(__file__).parent / "data"


def _log(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def _kinds(figures: StartupFigures) -> list[str]:
    return [failure.kind for failure in figures.failures]


# --- sample logs ------------------------------------------------------------------------


def test_tp8_log_reports_its_figures() -> None:
    """An M3-on-8xA800 TP8 log yields weights, KV, capacity, graphs and version."""
    figures = parse_startup_log(_log("m3_a800_tp8.log"))
    assert figures.weights_gib == pytest.approx(58.5)
    assert figures.model_load_s == pytest.approx(104.503118)
    assert figures.available_kv_gib == pytest.approx(10.2)
    assert figures.kv_cache_tokens == 241_664
    assert figures.max_concurrency == pytest.approx(1.84)
    assert figures.concurrency_tokens_per_request == 131_072
    assert figures.estimated_cuda_graph_gib == pytest.approx(3.87)
    assert figures.graph_capture_gib == pytest.approx(4.1)
    assert figures.graph_capture_s == pytest.approx(9.0)
    assert figures.cudagraph_profiling is False
    assert figures.gpu_memory_utilization == pytest.approx(0.95)
    assert figures.graph_counts == {"PIECEWISE": 51, "FULL": 35}
    assert figures.vllm_version == "0.26.0"
    assert figures.failures == ()
    assert figures.max_len_estimate is None
    assert figures.found_any


def test_older_single_gpu_log_reads_two_line_capacity() -> None:
    """An older log's `GPU KV cache size` and `Maximum concurrency` lines are both read."""
    figures = parse_startup_log(_log("llama8b_single_gpu_v091.log"))
    assert figures.weights_gib == pytest.approx(14.9888)
    assert figures.model_load_s == pytest.approx(13.204526)
    assert figures.available_kv_gib == pytest.approx(20.27)
    assert figures.kv_cache_tokens == 331_584
    assert figures.concurrency_tokens_per_request == 65_536
    assert figures.max_concurrency == pytest.approx(5.06)
    assert figures.graph_capture_s == pytest.approx(12.0)
    assert figures.graph_capture_gib == pytest.approx(0.53)
    assert figures.cudagraph_profiling is None
    assert figures.gpu_memory_utilization is None
    assert figures.graph_counts is None
    assert figures.estimated_cuda_graph_gib is None
    assert figures.vllm_version == "0.9.1"
    assert figures.failures == ()


def test_crash_log_lists_every_failure_line_in_order() -> None:
    """A mid-serving crash reports each illegal-access, fatal, died and EngineDeadError line,
    in order."""
    text = _log("crash_illegal_memory_access.log")
    figures = parse_startup_log(text)
    assert _kinds(figures) == [
        "illegal_memory_access",
        "engine_fatal",
        "illegal_memory_access",
        "worker_died",
        "engine_dead",
        "worker_died",
    ]
    lines = text.split("\n")
    for failure in figures.failures:
        assert lines[failure.line_no - 1].strip() == failure.text
    assert figures.failures[3].text.endswith(
        "Worker proc VllmWorker-3 died unexpectedly, shutting down executor."
    )
    assert figures.kv_cache_tokens == 1_131_776
    assert figures.max_concurrency == pytest.approx(4.32)


def test_max_len_log_captures_the_shortfall() -> None:
    """A max-seq-len failure yields N, needed and available GiB and the estimated length."""
    figures = parse_startup_log(_log("max_model_len_too_long.log"))
    assert figures.max_len_shortfall == MaxLenShortfall(
        max_seq_len=40_960, needed_kv_gib=5.62, available_kv_gib=4.5, estimated_max_len=32_768
    )
    assert figures.max_len_estimate == 32_768
    assert _kinds(figures) == [
        "startup_failed",
        "max_len_too_long",
        "max_len_too_long",
        "startup_failed",
    ]
    assert figures.weights_gib == pytest.approx(15.27)
    assert figures.available_kv_gib == pytest.approx(4.5)
    assert figures.kv_cache_tokens is None


def test_no_kv_memory_log_keeps_negative_available_memory() -> None:
    """Negative `Available KV cache memory` survives, beside the no-cache-blocks failure."""
    figures = parse_startup_log(_log("no_kv_memory.log"))
    assert figures.available_kv_gib == pytest.approx(-0.53)
    assert figures.weights_gib == pytest.approx(17.66)
    assert figures.model_load_s == pytest.approx(12.75)
    assert _kinds(figures) == ["startup_failed", "no_kv_memory", "startup_failed"]


# --- capacity, numbers, prefixes ---------------------------------------------------------


def test_newer_one_line_capacity() -> None:
    """The newer joined `GPU KV cache size: ..., Maximum concurrency ...` line gives both."""
    figures = parse_startup_log(
        "(EngineCore pid=241) INFO 10-08 14:47:52 [kv_cache_utils.py:2395] GPU KV cache size: "
        "661,808 tokens, Maximum concurrency for 32,768 tokens per request: 20.20x"
    )
    assert figures.kv_cache_tokens == 661_808
    assert figures.concurrency_tokens_per_request == 32_768
    assert figures.max_concurrency == pytest.approx(20.2)


@pytest.mark.parametrize(
    ("line", "tokens"),
    [
        ("GPU KV cache size: 331584 tokens", 331_584),
        ("GPU KV cache size: 331,584 tokens", 331_584),
        ("GPU KV cache size: 1,234,567 tokens", 1_234_567),
        ("GPU KV cache size: 864 tokens", 864),
    ],
)
def test_thousands_separators(line: str, tokens: int) -> None:
    """Token counts parse with or without thousands separators."""
    assert parse_startup_log(line).kv_cache_tokens == tokens


def test_concurrency_with_separated_request_length() -> None:
    """`Maximum concurrency for 131,072 tokens per request: 1.84x` parses both numbers."""
    figures = parse_startup_log("Maximum concurrency for 131,072 tokens per request: 1.84x")
    assert figures.concurrency_tokens_per_request == 131_072
    assert figures.max_concurrency == pytest.approx(1.84)


@pytest.mark.parametrize(
    ("line", "weights", "seconds"),
    [
        ("Model loading took 14.9888 GiB and 13.204526 seconds", 14.9888, 13.204526),
        ("Model loading took 17.66 GiB memory and 12.750000 seconds", 17.66, 12.75),
        ("Model loading took 12.1 GiB memory and 3 seconds", 12.1, 3.0),
    ],
)
def test_model_loading_variants(line: str, weights: float, seconds: float) -> None:
    """Both `Model loading took` phrasings, padded or not, give weights and seconds."""
    figures = parse_startup_log(line)
    assert figures.weights_gib == pytest.approx(weights)
    assert figures.model_load_s == pytest.approx(seconds)


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "(EngineCore_DP0 pid=413) INFO 07-25 10:00:00 [gpu_worker.py:123] ",
        "(Worker_TP0 pid=79) ",
        "(VllmWorker TP0 pid=1545) INFO 05-01 19:58:31 [gpu_worker.py:440] ",
        "2026-05-01 21:58:31.243 | (EngineCore pid=187) INFO 05-01 19:58:31 [x.py:9] ",
        "\x1b[1;36m(Worker_TP5 pid=84)\x1b[0;0m \x1b[32mINFO\x1b[0m 07-25 10:00:00 [a.py:1] ",
    ],
)
def test_prefixes_are_ignored(prefix: str) -> None:
    """Process, level, timestamp and ANSI-coloured prefixes do not hide a message."""
    figures = parse_startup_log(prefix + "Available KV cache memory: 20.27 GiB")
    assert figures.available_kv_gib == pytest.approx(20.27)


def test_ansi_codes_inside_the_message_are_stripped() -> None:
    """ANSI colour codes inside the message text are removed before matching."""
    figures = parse_startup_log(
        "\x1b[0;36mGPU KV cache size:\x1b[0m \x1b[1m241,664\x1b[0m tokens\n"
        "Graph capturing finished in \x1b[33m7\x1b[0m secs, took 1.29 GiB\x1b[0m\r\n"
    )
    assert figures.kv_cache_tokens == 241_664
    assert figures.graph_capture_s == pytest.approx(7.0)
    assert figures.graph_capture_gib == pytest.approx(1.29)


def test_source_location_is_not_part_of_the_match() -> None:
    """A message is recognised whatever `[file.py:line]` precedes it."""
    for location in ("[gpu_worker.py:227]", "[worker/gpu.py:9999]", "[]", ""):
        line = f"INFO 01-01 00:00:00 {location} Estimated CUDA graph memory: 1.58 GiB total"
        assert parse_startup_log(line).estimated_cuda_graph_gib == pytest.approx(1.58)


def test_negative_numbers() -> None:
    """Negative GiB figures keep their sign."""
    figures = parse_startup_log(
        "Available KV cache memory: -0.53 GiB\nModel loading took -1.5 GiB and 2.0 seconds"
    )
    assert figures.available_kv_gib == pytest.approx(-0.53)
    assert figures.weights_gib == pytest.approx(-1.5)


# --- per-rank aggregation ---------------------------------------------------------------

_RANKS = """\
(Worker_TP0 pid=79) INFO [runner.py:1] Model loading took 58.47 GiB memory and 104.8 seconds
(Worker_TP1 pid=80) INFO [runner.py:1] Model loading took 58.5 GiB memory and 99.1 seconds
(Worker_TP2 pid=81) INFO [runner.py:1] Model loading took 58.41 GiB memory and 101.0 seconds
(Worker_TP0 pid=79) INFO [gpu_worker.py:1] Available KV cache memory: 10.35 GiB
(Worker_TP1 pid=80) INFO [gpu_worker.py:1] Available KV cache memory: 10.2 GiB
(Worker_TP2 pid=81) INFO [gpu_worker.py:1] Available KV cache memory: 10.31 GiB
(Worker_TP0 pid=79) INFO [gpu_model_runner.py:2] Estimated CUDA graph memory: 3.87 GiB total
(Worker_TP1 pid=80) INFO [gpu_model_runner.py:2] Estimated CUDA graph memory: 3.95 GiB total
(Worker_TP0 pid=79) INFO [gpu_model_runner.py:3] Graph capturing finished in 9 secs, took 4.1 GiB
(Worker_TP1 pid=80) INFO [gpu_model_runner.py:3] Graph capturing finished in 11 secs, took 4.3 GiB
"""


def test_ranks_keep_max_weights_and_min_available_kv() -> None:
    """Across ranks, weights keep the largest value and available KV the smallest."""
    figures = parse_startup_log(_RANKS)
    assert figures.weights_gib == pytest.approx(58.5)
    assert figures.available_kv_gib == pytest.approx(10.2)


def test_ranks_keep_first_occurrence_of_other_figures() -> None:
    """Figures other than weights and available KV keep the first rank's value."""
    figures = parse_startup_log(_RANKS)
    assert figures.model_load_s == pytest.approx(104.8)
    assert figures.estimated_cuda_graph_gib == pytest.approx(3.87)
    assert figures.graph_capture_gib == pytest.approx(4.1)
    assert figures.graph_capture_s == pytest.approx(9.0)


# --- profiling, graph counts, version -----------------------------------------------------


def test_profiling_enabled_line() -> None:
    """The INFO `profiling is enabled` line sets True and its current utilization."""
    figures = parse_startup_log(
        "(EngineCore pid=111) INFO 06-07 08:56:43 [gpu_worker.py:481] CUDA graph memory "
        "profiling is enabled (default since v0.21.0). The current "
        "--gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8667 "
        "without CUDA graph memory profiling. To maintain the same effective KV cache size "
        "as before, increase --gpu-memory-utilization to 0.9333. To disable, set "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
    )
    assert figures.cudagraph_profiling is True
    assert figures.gpu_memory_utilization == pytest.approx(0.9)
    assert figures.vllm_version is None


def test_profiling_disabled_line() -> None:
    """The WARNING `profiling is disabled` line sets False and the `from` utilization."""
    figures = parse_startup_log(
        "WARNING 06-11 10:11:14 [gpu_worker.py:509] CUDA graph memory profiling is disabled "
        "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not "
        "accounted for during KV cache allocation, which may require lowering "
        "--gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of "
        "v0.21.0) and increasing --gpu-memory-utilization from 0.8500 to 0.8846."
    )
    assert figures.cudagraph_profiling is False
    assert figures.gpu_memory_utilization == pytest.approx(0.85)


def test_profiling_line_without_utilization() -> None:
    """A profiling notice without a utilization figure leaves the utilization None."""
    figures = parse_startup_log("CUDA graph memory profiling is enabled.")
    assert figures.cudagraph_profiling is True
    assert figures.gpu_memory_utilization is None


def test_graph_counts() -> None:
    """`Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 ...` gives counts."""
    figures = parse_startup_log(
        "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)"
    )
    assert figures.graph_counts == {"PIECEWISE": 51, "FULL": 35}


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("(APIServer pid=1) INFO [api_server.py:1] vLLM API server version 0.26.0", "0.26.0"),
        ("INFO Starting vLLM API server on http://0.0.0.0:8000 with version v0.10.1", "0.10.1"),
        ("Initializing a V1 LLM engine (v0.26.0) with config: model='x'", "0.26.0"),
        ("Initializing an LLM engine (v0.6.3.post1) with config: model='x'", "0.6.3.post1"),
        ("vLLM API server version 0.11.1rc2.dev31+g1a2b3c4d.", "0.11.1rc2.dev31+g1a2b3c4d"),
    ],
)
def test_vllm_version(line: str, version: str) -> None:
    """The vLLM version is read from the API-server banner or the engine-init line."""
    assert parse_startup_log(line).vllm_version == version


# --- failures ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("CUDA error: an illegal memory access was encountered", "illegal_memory_access"),
        ("ERROR [core.py:710] EngineCore encountered a fatal error.", "engine_fatal"),
        ("Worker proc VllmWorker-3 died unexpectedly, shutting down executor.", "worker_died"),
        ("Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.", "worker_died"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "cuda_oom"),
        ("torch.cuda.OutOfMemoryError: Allocation on device 0 failed", "cuda_oom"),
        ("To serve at least one request with the models's max seq len (8192)", "max_len_too_long"),
        ("ValueError: No available memory for the cache blocks. Try increasing", "no_kv_memory"),
        ("ERROR 10-08 20:33:48 [core.py:708] EngineCore failed to start.", "startup_failed"),
        ("RuntimeError: Engine core initialization failed. See root cause.", "startup_failed"),
    ],
)
def test_each_failure_kind(line: str, kind: str) -> None:
    """Each failure signature is reported once, with its kind, line number and text."""
    figures = parse_startup_log(f"INFO something else\n(Worker_TP1 pid=9) {line}  \n")
    assert figures.failures == (
        LogFailure(kind=kind, line_no=2, text=f"(Worker_TP1 pid=9) {line}"),
    )
    assert kind in FAILURE_KINDS


def test_every_failure_kind_is_covered() -> None:
    """FAILURE_KINDS names exactly the eight documented kinds."""
    assert set(FAILURE_KINDS) == {
        "illegal_memory_access",
        "engine_fatal",
        "worker_died",
        "engine_dead",
        "cuda_oom",
        "max_len_too_long",
        "no_kv_memory",
        "startup_failed",
    }


def test_failure_line_numbers_are_one_based() -> None:
    """Failure line numbers count from 1 and follow the text's line order."""
    text = "a\nEngineCore failed to start.\nb\r\nc\nCUDA out of memory\n"
    figures = parse_startup_log(text)
    assert [(f.kind, f.line_no) for f in figures.failures] == [
        ("startup_failed", 2),
        ("cuda_oom", 5),
    ]


def test_max_len_with_separators_and_model_spelling() -> None:
    """`model's` and separated numbers in the max-seq-len message parse too."""
    figures = parse_startup_log(
        "ValueError: To serve at least one request with the model's max seq len (262,144), "
        "9.29 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(9.28 GiB). Based on the available memory, the estimated maximum model length is "
        "260,800."
    )
    assert figures.max_len_shortfall == MaxLenShortfall(
        max_seq_len=262_144, needed_kv_gib=9.29, available_kv_gib=9.28, estimated_max_len=260_800
    )
    assert figures.max_len_estimate == 260_800
    assert figures.available_kv_gib is None


def test_max_len_wrapped_over_lines() -> None:
    """A max-seq-len message wrapped over following lines still yields its figures."""
    figures = parse_startup_log(
        "ValueError: To serve at least one request with the models's max seq len (16,384),\n"
        "(4.00 GiB KV cache is needed, which is larger than the available KV cache memory\n"
        "(2.50 GiB). Based on the available memory, the estimated maximum model length is "
        "10,240.\n"
    )
    assert figures.max_len_shortfall == MaxLenShortfall(
        max_seq_len=16_384, needed_kv_gib=4.0, available_kv_gib=2.5, estimated_max_len=10_240
    )
    assert _kinds(figures) == ["max_len_too_long"]


def test_max_len_without_estimate() -> None:
    """A max-seq-len message without an estimate leaves the estimate None."""
    figures = parse_startup_log(
        "To serve at least one request with the models's max seq len (8192), (2.0 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (0.45 GiB)."
    )
    assert figures.max_len_shortfall == MaxLenShortfall(
        max_seq_len=8192, needed_kv_gib=2.0, available_kv_gib=0.45, estimated_max_len=None
    )
    assert figures.max_len_estimate is None


# --- robustness --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "\n\n\n", "hello world", "INFO 01-01 00:00:00 [x.py:1] Application startup complete."],
)
def test_unrecognised_text_finds_nothing(text: str) -> None:
    """Text without a recognised line gives empty figures with found_any False."""
    figures = parse_startup_log(text)
    assert figures == StartupFigures()
    assert not figures.found_any


def test_found_any_counts_failures_alone() -> None:
    """A log whose only recognised line is a failure still counts as found."""
    assert parse_startup_log("CUDA out of memory").found_any


def test_huge_numbers_do_not_raise() -> None:
    """Numbers too long for int() are dropped rather than raising."""
    figures = parse_startup_log(f"GPU KV cache size: {'9' * 5000} tokens\n")
    assert figures.kv_cache_tokens is None


def test_binary_junk_does_not_raise() -> None:
    """Decoded binary junk, NULs and stray escapes parse without error."""
    junk = bytes(range(256)).decode("latin-1") * 4 + "\x1b[\x1b[31\x00Available KV cache memory: "
    assert not parse_startup_log(junk).found_any


def test_figures_are_frozen_and_hashable() -> None:
    """Parsed figures are immutable values that can be hashed."""
    figures = parse_startup_log(_log("m3_a800_tp8.log"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        figures.weights_gib = 1.0  # type: ignore[misc]
    assert hash(figures) == hash(parse_startup_log(_log("m3_a800_tp8.log")))


_SAMPLE_LINES = [
    line
    for name in (
        "m3_a800_tp8.log",
        "llama8b_single_gpu_v091.log",
        "crash_illegal_memory_access.log",
        "max_model_len_too_long.log",
        "no_kv_memory.log",
    )
    for line in _log(name).split("\n")
    if line
]


@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    """parse_startup_log returns StartupFigures for any text whatsoever."""
    assert isinstance(parse_startup_log(text), StartupFigures)


@given(
    st.lists(
        st.one_of(
            st.sampled_from(_SAMPLE_LINES),
            st.text(st.characters(blacklist_characters="\n")),
        ),
        max_size=30,
    )
)
def test_crlf_and_lf_parse_the_same(lines: list[str]) -> None:
    """Joining the same lines with `\\n` or `\\r\\n` gives the same figures and failures."""
    assert parse_startup_log("\n".join(lines)) == parse_startup_log("\r\n".join(lines))


# --- the real-startup corpus, every vLLM version in it -----------------------------------

CORPUS = Path(__file__).parents[2] / "benchmarks" / "corpus" / "real-startups" / "startups.jsonl"
# corpus figure -> StartupFigures field
CORPUS_FIELDS = {
    "model_loading_gib": "weights_gib",
    "available_kv_cache_gib": "available_kv_gib",
    "kv_cache_tokens": "kv_cache_tokens",
    "max_concurrency": "max_concurrency",
    "max_concurrency_at_tokens": "concurrency_tokens_per_request",
    "cuda_graph_gib_estimated": "estimated_cuda_graph_gib",
    "cuda_graph_gib_captured": "graph_capture_gib",
    "gpu_blocks": "gpu_blocks",
}
# Ranks disagree here and the scanner keeps the smallest KV budget by design (70.58 GiB on
# the other pipeline stage; the corpus records the first line printed).
SMALLEST_RANK_KV = {"gh200x8-qwen3-30b-a3b-2507-tp4pp2-ray": 70.58}


def _corpus_entries() -> list[dict[str, object]]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.parametrize("entry", _corpus_entries(), ids=lambda e: str(e["id"]))
def test_corpus_log_lines_give_the_logged_figures(entry: dict[str, object]) -> None:
    """Every figure a corpus entry logged is read back from its exact log lines."""
    figures = parse_startup_log("\n".join(entry["log_lines"]))  # type: ignore[arg-type]
    for key, name in CORPUS_FIELDS.items():
        logged = entry["figures"][key]  # type: ignore[index]
        if key == "available_kv_cache_gib" and entry["id"] in SMALLEST_RANK_KV:
            logged = SMALLEST_RANK_KV[str(entry["id"])]
        if logged is not None:
            assert getattr(figures, name) == pytest.approx(logged), (entry["id"], key)


def test_v0_profiling_sentence() -> None:
    """V0's worker.py sentence gives the KV budget, utilization, activation and non-torch memory."""
    log = (
        "INFO 05-07 22:17:23 [model_runner.py:1140] Model loading took 15.6841 GiB and "
        "17.586636 seconds\n"
        "INFO 05-07 22:17:25 [worker.py:287] the current vLLM instance can use total_gpu_memory "
        "(23.56GiB) x gpu_memory_utilization (0.90) = 21.20GiB\n"
        "INFO 05-07 22:17:25 [worker.py:287] model weights take 15.68GiB; non_torch_memory takes "
        "0.06GiB; PyTorch activation peak memory takes 0.12GiB; the rest of the memory reserved "
        "for KV Cache is 5.34GiB.\n"
        "INFO 05-07 22:17:26 [executor_base.py:112] # cuda blocks: 3646, # CPU blocks: 2730\n"
    )
    figures = parse_startup_log(log)
    assert figures.weights_gib == pytest.approx(15.6841)
    assert figures.available_kv_gib == pytest.approx(5.34)
    assert figures.gpu_memory_utilization == pytest.approx(0.90)
    assert figures.total_memory_gib == pytest.approx(23.56)
    assert figures.activation_peak_gib == pytest.approx(0.12)
    assert figures.non_torch_gib == pytest.approx(0.06)
    assert figures.gpu_blocks == 3646
    assert parse_startup_log("# GPU blocks: 1,024, # CPU blocks: 512").gpu_blocks == 1024


def test_v1_usage_line_banner_and_host_pool() -> None:
    """V1's DEBUG usage line, the 0.11+ banner's version and 0.32's combined capacity line."""
    usage = (
        "(EngineCore pid=242) DEBUG 04-22 00:04:24 [v1/worker/gpu_worker.py:661] Free memory on "
        "device (78.68/79.19 GiB) on startup. Desired GPU memory utilization is (0.95, 75.23 GiB). "
        "Actual usage is 14.99 GiB for weight, 1.89 GiB for peak activation, 0.25 GiB for "
        "non-torch memory, and 0.91 GiB for CUDAGraph memory."
    )
    figures = parse_startup_log(usage)
    assert (figures.activation_peak_gib, figures.non_torch_gib) == (1.89, 0.25)
    banner = (
        "(APIServer pid=6539) INFO 04-18 20:22:57 [utils.py:299] ▄▄ ▄█ █ █ █ ▀▄▀ █ version 0.19.0"
    )
    assert parse_startup_log(banner).vllm_version == "0.19.0"
    combined = (
        "INFO [kv_cache_utils.py:2328] GPU + host KV cache size: 1,048,576 tokens, Maximum "
        "concurrency for 8,192 tokens per request: 128.00x"
    )
    figures = parse_startup_log(combined)
    assert figures.kv_cache_tokens == 1_048_576
    assert figures.max_concurrency == pytest.approx(128.0)


def test_v1_utilization_and_total_memory_from_a_real_019_log() -> None:
    """vLLM 0.19 states gpu_memory_utilization in its non-default args and DEBUG usage line
    and the device total in "Free memory on device (free/total GiB)" (corpus entry
    llmd-llama31-8b-h100-tp1): both are read."""
    entry = next(e for e in _corpus_entries() if e["id"] == "llmd-llama31-8b-h100-tp1")
    figures = parse_startup_log("\n".join(entry["log_lines"]))  # type: ignore[arg-type]
    assert figures.gpu_memory_utilization == pytest.approx(0.95)
    assert figures.total_memory_gib == pytest.approx(79.19)
    args = (
        "(APIServer pid=1) INFO 04-22 00:03:35 [entrypoints/utils.py:233] non-default args: "
        "{'model': 'm', 'max_model_len': 8192, 'gpu_memory_utilization': 0.92}"
    )
    assert parse_startup_log(args).gpu_memory_utilization == pytest.approx(0.92)
    desired = "DEBUG [gpu_worker.py:661] Desired GPU memory utilization is (0.8, 63.35 GiB)."
    assert parse_startup_log(desired).gpu_memory_utilization == pytest.approx(0.8)
    error = (
        "ValueError: Free memory on device cuda:0 (30.1/79.19 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 71.27 GiB)."
    )
    figures = parse_startup_log(error)
    assert (figures.total_memory_gib, figures.gpu_memory_utilization) == (79.19, 0.9)
