"""The golden commands, how one is run, and the normalisation of what it writes.

Each case is one `python -m servekit ...` command run in a subprocess from this directory
(inputs are given as `inputs/FILE`, copies of the repository's examples and tune's test
profile, so an edit to `examples/` cannot move the golden outputs), with `--out` a fresh
temporary directory. What it prints on stdout and every file it writes that the case names
are read back, normalised (`normalise`) and compared with `data/CASE.json`.

The same function runs the commands of the tree under test (the test) and of the tree the
golden files were taken from (`make_golden.py --src`): only `PYTHONPATH` differs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = HERE / "data"

LLAMA = "llama-3.1-70b-4xh100"
M3 = "minimax-m3-mxfp8-8xa800"
M3_NO_SPEC = "minimax-m3-mxfp8-8xa800-no-eagle3"
M3_MULTINODE = "minimax-m3-bf16-2x8xa800"
PROFILES = [
    "deepseek-v3-8xh200",
    LLAMA,
    M3_MULTINODE,
    M3_NO_SPEC,
    "minimax-m3-mxfp8-8xa800-v0251-patched",
    M3,
]
# Short requests keep the records small; the simulated timings are exact either way.
SHORT = ("--input-len", "256", "--output-len", "16")


@dataclass(frozen=True)
class Case:
    """One golden command: `argv` after `servekit`, and the files of `--out` it captures
    (`--out OUT` is appended when `files` is not empty)."""

    name: str
    argv: tuple[str, ...]
    files: tuple[str, ...] = ()


SIM_FILES = ("summary.json", "records.jsonl")
TUNE_FILES = ("tune.json", "tiny-tune-tuned.yaml", "tune-journal.jsonl", "report/report.md")


def _sim(name: str, profile: str, *args: str) -> Case:
    return Case(f"sim-{name}", ("sim", "run", "--profile", profile, *args, "--json"), SIM_FILES)


def _tune(name: str, *args: str) -> Case:
    argv = ("tune", "inputs/tiny-tune.yaml", "--space", "inputs/tiny-space.yaml", *args)
    return Case(f"tune-{name}", (*argv, "--json"), TUNE_FILES)


CASES: list[Case] = [
    # Fixed-length closed loop: several concurrency levels, no speculation.
    _sim("closed", LLAMA, "--concurrency", "1,4,16", "--requests-per-point", "24", *SHORT,
         "--seed", "11"),
    # Closed loop with EAGLE3 at temperature 0, and an SLO (goodput, the slo block).
    _sim("closed-eagle3-slo", M3, "--concurrency", "2,8", "--requests-per-point", "16",
         "--input-len", "512", "--output-len", "24", "--temperature", "0", "--seed", "3",
         "--slo", "ttft_p99<=500ms,tpot_p99<=50ms"),
    # Open loop: Poisson arrivals at three rates, inf (all at once) among them.
    _sim("open-poisson", LLAMA, "--rate", "0.5,2,inf", "--arrival", "poisson",
         "--requests-per-point", "20", *SHORT, "--seed", "5"),
    # Open loop: gamma and constant arrivals.
    _sim("open-gamma", M3_NO_SPEC, "--rate", "1,4", "--arrival", "gamma:2",
         "--requests-per-point", "16", *SHORT, "--seed", "8"),
    _sim("open-constant", M3, "--rate", "3", "--arrival", "constant",
         "--requests-per-point", "16", *SHORT, "--seed", "8"),
    # Synthetic multi-turn sessions (closed: concurrent sessions) with think time.
    _sim("sessions-turns", LLAMA, "--turns", "3", "--sessions", "6", "--concurrency", "2,4",
         "--input-len", "128", "--output-len", "16", "--think-time", "0.5:exponential",
         "--seed", "9"),
    # Sessions from a JSONL of conversations (open: sessions/s) and from a ShareGPT file.
    _sim("sessions-conversations", LLAMA, "--conversations", "inputs/conversations.jsonl",
         "--turns", "2", "--rate", "0.5", "--sessions", "4", "--output-len", "16",
         "--seed", "2"),
    _sim("sessions-sharegpt", M3, "--conversations", "inputs/sharegpt-multiturn.json",
         "--concurrency", "2", "--sessions", "3", "--think-time", "1:uniform", "--seed", "6"),
    # Agent loops answering tool calls, on EAGLE3.
    _sim("agent", M3, "--agent", "--tools", "inputs/tools.json", "--sessions", "4",
         "--agent-turns", "4", "--concurrency", "2", "--tool-latency", "0.2:uniform",
         "--input-len", "128", "--output-len", "32", "--seed", "4"),
    _sim("agent-rate", LLAMA, "--agent", "--tools", "inputs/tools.json", "--sessions", "3",
         "--agent-turns", "3", "--rate", "1", "--input-len", "128", "--output-len", "24",
         "--tool-result", '{"temp_c": 21}', "--seed", "12"),
    # Trace replays: Mooncake (hash ids: prefix cache hits), servekit JSONL sped up, Azure
    # and BurstGPT windows.
    _sim("trace-mooncake", LLAMA, "--trace", "inputs/mooncake.jsonl", "--max-requests", "24",
         "--seed", "1"),
    _sim("trace-jsonl", M3, "--trace", "inputs/servekit.jsonl", "--trace-format", "jsonl",
         "--time-scale", "0.5", "--seed", "1"),
    _sim("trace-azure", LLAMA, "--trace", "inputs/azure.csv", "--trace-format", "azure",
         "--max-requests", "8", "--seed", "1"),
    _sim("trace-burstgpt", M3_NO_SPEC, "--trace", "inputs/burstgpt.csv",
         "--trace-format", "burstgpt", "--trace-start", "2", "--trace-duration", "30",
         "--seed", "1"),
    # tune in simulation: a closed loop, an open loop and sessions over the small space.
    _tune("closed", "--slo", "ttft_p99<=500ms,tpot_p50<=25ms", "--requests-per-point", "32",
          "--seed", "5"),
    _tune("rate", "--slo", "ttft_p99<=1s,tpot_p99<=40ms", "--load", "rate",
          "--arrival", "poisson", "--requests-per-point", "32", "--seed", "6"),
    _tune("sessions", "--slo", "ttft_p90<=800ms", "--turns", "2", "--sessions", "8",
          "--input-len", "128", "--output-len", "32", "--seed", "7"),
    # The memory plan of every built-in profile, and one with an override.
    *(Case(f"plan-{p}", ("plan", p, "--json")) for p in PROFILES),
    Case("plan-llama-set", ("plan", LLAMA, "--set", "max_model_len=65536",
                            "--set", "max_num_seqs=64", "--json")),
    # Launch artifacts: every target of one profile, and the multi-node targets.
    *(Case(f"render-{t}", ("render", M3, "--target", t, "--json"))
      for t in ("vllm", "docker", "compose", "k8s", "script")),
    *(Case(f"render-multinode-{t}", ("render", M3_MULTINODE, "--target", t, "--json"))
      for t in ("k8s", "script")),
]  # fmt: skip

# ---- normalisation: only what differs between two runs of the same tree.
# Wall-clock stamps of the real process (summary.json and tune.json `started_at`).
TIME_KEYS = frozenset({"started_at"})
# servekit's own version (summary.json, tune.json): not behaviour.
VERSION_KEYS = frozenset({"servekit_version"})
# tune.json's searches[].wall_s: the real seconds the search took on this host.
WALL_KEYS = frozenset({"wall_s"})
SUBSTITUTIONS = [
    # The simulated server names itself with servekit's version.
    (re.compile(r"servekit-sim \S+"), "servekit-sim <version>"),
    # tune's first verdict line ends with the searches' wall time ("in 0 s of simulation").
    (re.compile(r"in \d+ s of simulation"), "in <wall> s of simulation"),
    # report.md's title: the run's start stamp and servekit's version, "(STAMP, servekit V)".
    (re.compile(r"\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00, servekit [^\s)]+\)"),
     "(<time>, servekit <version>)"),
]  # fmt: skip
# tune.json's `pareto` is sorted by per-stream speed alone, from a set of (id, load, ...)
# tuples (servekit.tune.search.pareto): points that tie on speed come in the set's order,
# which follows the ids' string hashes and so changes with PYTHONHASHSEED from one run to
# the next. Ties are put in (id, load) order; the order by speed is kept as it is.
PARETO_KEY = "pareto"


def _pareto_order(point: Any) -> tuple[Any, ...]:
    return (point["per_stream_tok_s"], point["id"], point["load"], point["output_tok_s_per_gpu"])


def normalise(value: Any, out: Path) -> Any:
    """`value` (parsed JSON or text) with the run's temporary directory written `<out>` and
    the fields above replaced; everything else, every simulated figure, is kept exactly."""
    if isinstance(value, dict):
        done: dict[str, Any] = {}
        for key, item in value.items():
            if key in TIME_KEYS and isinstance(item, str):
                done[key] = "<time>"
            elif key in VERSION_KEYS and isinstance(item, str):
                done[key] = "<version>"
            elif key in WALL_KEYS and isinstance(item, int | float):
                done[key] = "<wall>"
            elif key == PARETO_KEY and isinstance(item, list):
                done[key] = normalise(sorted(item, key=_pareto_order), out)
            else:
                done[key] = normalise(item, out)
        return done
    if isinstance(value, list):
        return [normalise(item, out) for item in value]
    if isinstance(value, str):
        text = value.replace(str(out), "<out>").replace(str(ROOT), "<repo>")
        for pattern, replacement in SUBSTITUTIONS:
            text = pattern.sub(replacement, text)
        return text
    return value


def _extends(text: str, out: Path) -> str:
    """The tuned profile's `extends:` is the input profile's path relative to --out: written
    as the path from this directory instead."""

    def rel(match: re.Match[str]) -> str:
        target = (out / match.group(1)).resolve()
        return f"extends: {os.path.relpath(target, HERE)}"

    return re.sub(r"^extends: (.+)$", rel, text, flags=re.MULTILINE)


def _read(path: Path, out: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if path.suffix == ".yaml":
        text = _extends(text, out)
    return text.splitlines()


def run_case(case: Case, src: Path, tmp: Path) -> dict[str, Any]:
    """Run `case` with servekit from `src` (a tree's `src/`) and return its normalised
    outputs: the command, exit code, stdout (parsed), stderr lines and the files named."""
    out = tmp / case.name
    argv = [*case.argv, *(("--out", str(out)) if case.files else ())]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVEKIT_")}
    env["PYTHONPATH"] = str(src)
    done = subprocess.run(
        [sys.executable, "-m", "servekit", *argv],
        cwd=HERE, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    files: dict[str, Any] = {}
    for name in case.files:
        path = out / name
        files[name] = _read(path, out) if path.is_file() else None
    stdout: Any = done.stdout
    if case.files and (out / case.files[0]).is_file():
        # --json prints the document it writes: kept once, with the check that it is so.
        same = done.stdout == (out / case.files[0]).read_text(encoding="utf-8")
        stdout = f"<same as {case.files[0]}>" if same else json.loads(done.stdout)
    elif done.stdout.strip():
        stdout = json.loads(done.stdout)
    result = {
        "command": ["servekit", *case.argv, *(("--out", "<out>") if case.files else ())],
        "exit_code": done.returncode,
        "stdout": stdout,
        "stderr": done.stderr.splitlines(),
        "files": files,
    }
    return dict(normalise(result, out))


def dumps(result: dict[str, Any]) -> str:
    """The golden file's text: indented, with each record (a list of objects) on one line so
    that the files stay small and a diff shows which records changed."""

    def encode(value: Any, indent: str) -> str:
        inner = indent + " "
        if isinstance(value, dict) and value:
            items = [f"{inner}{json.dumps(k)}: {encode(v, inner)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + "\n" + indent + "}"
        if isinstance(value, list) and value:
            flat = all(isinstance(v, dict) and not any(isinstance(x, dict) for x in v.values())
                       for v in value)  # fmt: skip
            if flat or all(isinstance(v, str) for v in value):
                lines = [inner + json.dumps(v, separators=(",", ":")) for v in value]
                return "[\n" + ",\n".join(lines) + "\n" + indent + "]"
            if any(isinstance(v, dict | list) for v in value):
                lines = [inner + encode(v, inner) for v in value]
                return "[\n" + ",\n".join(lines) + "\n" + indent + "]"
            return json.dumps(value, separators=(",", ":"))
        return json.dumps(value)

    return encode(result, "") + "\n"


def golden_path(case: Case) -> Path:
    """Where the golden outputs of `case` are stored."""
    return DATA / f"{case.name}.json"
