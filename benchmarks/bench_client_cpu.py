"""Benchmark: whole-process client CPU per million streamed tokens (not a test).

The fast loopback server of `bench_client_ceiling.py` (256 one-token chunks per request
with continuous usage, its own process pinned to core 1) is driven by each client as a
child process pinned to core 0: `servekit bench` through its CLI, closed loop at
concurrency 64, and `vllm bench serve` (through its module, as the ceiling benchmark runs
it) on the same workload. A client's CPU is user + system time from the child's rusage,
so it counts everything the process does: start-up, the run, the summary and the files
it writes. Start-up is taken out by difference: the CPU of a 3,000-request run minus a
1,000-request run, per million tokens streamed in the extra 2,000 requests (the tokens
each tool itself reports). A round runs A-small, B-small, B-large, A-large, which tool
is A alternating by round, so both marginal spans have the same midpoint and a host whose
speed drifts steadily through a round moves both tools alike. Every round is printed with
its ratio (vllm bench serve's CPU per token over servekit's), then the medians and the
median of the rounds' ratios.

`variants` measures servekit alone on `fast_server.py` (the same 256 one-token chunks, 32
a write, in the shape each request asks for) for chat and completions, with and without
`return_token_ids`: a round runs the four shapes' small runs, then their large runs in
reverse order, which shape leads rotating by round.

Run: .venv/bin/python benchmarks/bench_client_cpu.py [rounds]
     .venv/bin/python benchmarks/bench_client_cpu.py variants [rounds]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_client_ceiling import SERVER, VLLM_BENCH, write_tokenizer

SMALL, LARGE = 1000, 3000
CONCURRENCY = 64
OUTPUT_LEN = 256
ROUNDS = 5


@dataclass(frozen=True)
class Run:
    """One client process: its CPU seconds (user + system) and the tokens it streamed."""

    cpu_s: float
    tokens: int


def pinned(cmd: list[str], core: int) -> list[str]:
    """The command pinned to one core when `taskset` exists."""
    return ["taskset", "-c", str(core), *cmd] if shutil.which("taskset") else cmd


def measure(cmd: list[str], out: Path) -> tuple[float, str]:
    """Run a child process to the end; return its CPU seconds (user + system) and stdout."""
    with (out / "stdout").open("w") as stdout, (out / "stderr").open("w") as stderr:
        child = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=os.environ.copy())
        _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        tail = (out / "stderr").read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"{cmd[:6]}... exited with status {status}: {tail}")
    return usage.ru_utime + usage.ru_stime, (out / "stdout").read_text(errors="replace")


def servekit_run(port: int, requests: int, *extra: str) -> Run:
    """servekit bench through its CLI, as a user runs it (`extra`: more of its options)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-m", "servekit", "bench", "--url", f"http://127.0.0.1:{port}",
            "--model", "fast", "--concurrency", str(CONCURRENCY),
            "--requests-per-point", str(requests), "--warmup", "0", "--input-len", "4",
            "--output-len", str(OUTPUT_LEN), "--out", f"{tmp}/run", *extra,
        ]  # fmt: skip
        cpu, _ = measure(pinned(cmd, 0), Path(tmp))
        summary = json.loads(Path(tmp, "run", "summary.json").read_text(encoding="utf-8"))
    return Run(cpu, sum(int(p["output_tokens"]) for p in summary["points"]))


def vllm_run(port: int, requests: int, tokenizer: Path) -> Run:
    """vllm bench serve on the same workload."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-c", VLLM_BENCH, "--backend", "openai-chat",
            "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/chat/completions",
            "--model", "fast", "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", "4", "--random-output-len", str(OUTPUT_LEN),
            "--num-prompts", str(requests), "--max-concurrency", str(CONCURRENCY),
            "--ignore-eos",
        ]  # fmt: skip
        cpu, stdout = measure(pinned(cmd, 0), Path(tmp))
    found = re.search(r"Total generated tokens:\s+(\d+)", stdout)
    if found is None:
        raise RuntimeError("vllm bench serve printed no 'Total generated tokens'")
    return Run(cpu, int(found.group(1)))


def per_million(small: Run, large: Run) -> float:
    """Marginal CPU seconds per million tokens: (large - small) CPU over (large - small) tokens."""
    return (large.cpu_s - small.cpu_s) / ((large.tokens - small.tokens) / 1e6)


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


VARIANTS = {
    "chat, token ids": ("--api", "chat", "--token-ids", "on"),
    "chat, usage": ("--api", "chat", "--token-ids", "off"),
    "completions, token ids": ("--api", "completions", "--token-ids", "on"),
    "completions, usage": ("--api", "completions", "--token-ids", "off"),
}


def variants(rounds: int) -> None:
    """Print servekit's marginal CPU per million tokens for each stream shape, per round."""
    port = free_port()
    server_py = Path(__file__).resolve().parent / "fast_server.py"
    server = subprocess.Popen(pinned([sys.executable, str(server_py), str(port)], 1))
    found: dict[str, list[float]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    try:
        time.sleep(1.0)
        for number in range(rounds):
            order = names[number % len(names) :] + names[: number % len(names)]
            small = {name: servekit_run(port, SMALL, *VARIANTS[name]) for name in order}
            large = {name: servekit_run(port, LARGE, *VARIANTS[name]) for name in order[::-1]}
            line = []
            for name in names:
                found[name].append(per_million(small[name], large[name]))
                line.append(f"{name} {found[name][-1]:.2f}")
            load = os.getloadavg()[0]
            print(f"round {number + 1} (s/M tokens): {'; '.join(line)} (load {load:.1f})")
    finally:
        server.terminate()
        server.wait(timeout=10)
    for name, values in found.items():
        print(f"median {name}: {statistics.median(values):.2f} s/M tokens "
              f"({min(values):.2f}-{max(values):.2f})")  # fmt: skip


def main() -> None:
    """Print each round's marginal CPU per million tokens for both clients, and the ratio."""
    if sys.argv[1:2] == ["variants"]:
        variants(int(sys.argv[2]) if len(sys.argv) > 2 else ROUNDS)
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    port = free_port()
    server = subprocess.Popen(pinned([sys.executable, "-c", SERVER, str(port)], 1))
    ours: list[float] = []
    theirs: list[float] = []
    ratios: list[float] = []
    try:
        time.sleep(1.0)
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer = Path(tmp) / "tok"
            write_tokenizer(tokenizer)
            for number in range(1, rounds + 1):
                runs = {
                    "servekit": lambda n: servekit_run(port, n),
                    "vllm": lambda n: vllm_run(port, n, tokenizer),
                }
                first, second = ("servekit", "vllm") if number % 2 else ("vllm", "servekit")
                # A B B A: both tools' marginal spans share their midpoint, so a host that
                # drifts steadily through the round moves both alike
                small = {first: runs[first](SMALL), second: runs[second](SMALL)}
                large = {second: runs[second](LARGE), first: runs[first](LARGE)}
                mine = per_million(small["servekit"], large["servekit"])
                other = per_million(small["vllm"], large["vllm"])
                ours.append(mine)
                theirs.append(other)
                ratios.append(other / mine)
                load = os.getloadavg()[0]
                print(
                    f"round {number}: servekit {mine:.2f} s/M tokens, vllm bench serve "
                    f"{other:.2f} s/M tokens, ratio {other / mine:.2f} (load {load:.1f})",
                    flush=True,
                )
    finally:
        server.terminate()
        server.wait(timeout=10)
    mine, other = statistics.median(ours), statistics.median(theirs)
    print(
        f"median: servekit {mine:.2f} s/M tokens ({min(ours):.2f}-{max(ours):.2f}), "
        f"vllm bench serve {other:.2f} ({min(theirs):.2f}-{max(theirs):.2f}); "
        f"vllm / servekit {other / mine:.2f}; median of the rounds' ratios "
        f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
