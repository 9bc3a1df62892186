"""`logs analyze` on hostile input (issue #14 item 12 and the fuzz tests): streamed in
bounded memory, non-regular files refused, and any text or bytes give a result or one
ServekitError line, in bounded time, the same however the log is cut into batches."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servekit.cli.main import cli
from servekit.doctor.log_analysis import LogAnalyzer, analyze_log
from servekit.plan.startup_log import StartupLogScanner, parse_startup_log

ROOT = Path(__file__).resolve().parents[2]
LOGS = [
    ROOT / "tests" / "doctor" / "data" / "m3_v0251_illegal_memory_access.log",
    *sorted((ROOT / "tests" / "plan" / "data").glob("*.log")),
]
REAL_LINES = sorted(
    {line for log in LOGS for line in log.read_text(encoding="utf-8").splitlines() if line}
)
# Pieces of the lines the scanner looks for, to splice with numbers and noise.
FRAGMENTS = [
    "Model loading took ", " GiB memory and ", " seconds", "Available KV cache memory: ",
    "GPU KV cache size: ", " tokens", "Maximum concurrency for ", " tokens per request: ",
    "x", "Estimated CUDA graph memory: ", "Graph capturing finished in ", " secs, took ",
    "CUDA graph memory profiling is enabled", "--gpu-memory-utilization=", "vLLM API server "
    "version ", "To serve at least one request with the models's max seq len (",
    " GiB KV cache is needed", "estimated maximum model length is ", "illegal memory access",
    "EngineCore encountered a fatal error", "Profiling CUDA graph memory: PIECEWISE=",
    "\x1b[0;36m", "\r", ",", "-", ".", "(", ")", "1", "999", "9" * 400, "1,234,567",
]  # fmt: skip
FUZZ = settings(
    max_examples=120, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip

log_lines = st.lists(
    st.one_of(
        st.sampled_from(REAL_LINES),
        st.text(max_size=80),
        st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join),
    ),
    max_size=60,
)


def _batches(lines: list[str], cuts: list[int]) -> list[list[str]]:
    points = sorted({c % (len(lines) + 1) for c in cuts} | {0, len(lines)})
    return [lines[a:b] for a, b in itertools.pairwise(points)]


@FUZZ
@given(lines=log_lines, cuts=st.lists(st.integers(min_value=0, max_value=10**6), max_size=6))
def test_the_scan_is_the_same_however_the_log_is_cut_into_batches(
    lines: list[str], cuts: list[int]
) -> None:
    """Feeding a log batch by batch (as the file reader does) gives exactly the analysis of
    the whole text: figures, failures with their line numbers, issues and quoted lines."""
    whole = analyze_log("\n".join(lines))
    analyzer = LogAnalyzer()
    scanner = StartupLogScanner()
    for batch in _batches(lines, cuts):
        analyzer.feed(batch)
        scanner.feed(batch)
    assert analyzer.finish() == whole
    assert scanner.finish() == whole.figures


@FUZZ
@given(text=st.one_of(st.text(max_size=2000), log_lines.map("\n".join)))
def test_any_text_gives_figures_in_bounded_time(text: str) -> None:
    """Whatever the text, the scanners return (they never raise) and quickly."""
    start = time.perf_counter()
    analysis = analyze_log(text)
    figures = parse_startup_log(text)
    assert analysis.figures == figures
    assert all(f.line_no >= 1 for f in figures.failures)
    assert time.perf_counter() - start < 5.0


@FUZZ
@given(data=st.one_of(st.binary(max_size=4000), log_lines.map(lambda ls: "\n".join(ls).encode())))
def test_any_bytes_as_a_log_file_give_a_result_or_one_error_line(
    data: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`servekit logs analyze FILE` on arbitrary bytes: exit 0 or 3 with output, or one
    `servekit: error:` line (a file with no vLLM lines); never a traceback."""
    log = tmp_path_factory.mktemp("fuzz") / "engine.log"
    log.write_bytes(data)
    start = time.perf_counter()
    result = CliRunner().invoke(cli, ["logs", "analyze", str(log), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 1, 3), result.output
    if result.exit_code == 1:
        assert result.stderr.startswith("servekit: error: ")
        assert len(result.stderr.splitlines()) == 1
    assert time.perf_counter() - start < 5.0


def test_a_line_that_never_ends_is_cut_not_accumulated(tmp_path: Path) -> None:
    """A 5 MiB line without a newline after real startup lines: the figures are read, the
    line numbers after it stay right, and the long line costs no more than its cut."""
    log = tmp_path / "engine.log"
    head = (ROOT / "tests" / "plan" / "data" / "m3_a800_tp8.log").read_bytes()
    crash = b"ERROR CUDA error: an illegal memory access was encountered\n"
    log.write_bytes(head + b"A" * (5 << 20) + b"\n" + crash)
    result = CliRunner().invoke(cli, ["logs", "analyze", str(log), "--json"])
    assert result.exit_code == 3, result.output
    expected_line = head.count(b"\n") + 2
    assert f'"line": {expected_line}' in result.output


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_non_regular_file_is_refused_at_once(kind: str, tmp_path: Path) -> None:
    """A FIFO (which blocked forever), /dev/zero (which never ends) or a directory: one
    usage error line, exit 2, within seconds."""
    if kind == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    elif kind == "device":
        target = Path("/dev/zero")
    else:
        target = tmp_path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "servekit", "logs", "analyze", str(target)],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("servekit: error: ")
    assert str(target) in lines[0]


def _long_log(path: Path, size_bytes: int) -> int:
    crash = LOGS[0].read_text(encoding="utf-8")
    mark = "INFO:     Application startup complete.\n"
    head, _, tail = crash.partition(mark)
    serving = [line for line in tail.splitlines() if "POST" in line or "Engine 000" in line]
    block = ("\n".join(serving * 2000) + "\n").encode()
    with path.open("wb") as file:
        file.write((head + mark).encode())
        for _ in range(size_bytes // len(block) + 1):
            file.write(block)
        file.write(tail.encode())
    return path.stat().st_size


PEAK = """
import resource, sys
from click.testing import CliRunner
from servekit.cli.main import cli
small = CliRunner().invoke(cli, ["logs", "analyze", sys.argv[1], "--json"])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
big = CliRunner().invoke(cli, ["logs", "analyze", sys.argv[2], "--json"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(small.exit_code, big.exit_code, after - before)
"""


@pytest.mark.slow
def test_a_large_log_is_analyzed_in_bounded_memory(tmp_path: Path) -> None:
    """A 64 MiB log: peak RSS grows by well under the file's size (the whole-file read took
    about 6 times its size), and the crash at its end is still found."""
    size = _long_log(tmp_path / "long.log", 64 << 20)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(LOGS[0]), str(tmp_path / "long.log")],
        capture_output=True, text=True, timeout=300, env=env, check=True,
    )  # fmt: skip
    small_code, big_code, growth_kib = (int(v) for v in done.stdout.split())
    assert (small_code, big_code) == (3, 3)
    assert growth_kib * 1024 < size / 4, f"peak RSS grew {growth_kib / 1024:.0f} MiB"
