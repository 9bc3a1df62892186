"""Measurement accuracy against a scripted loopback server that records the truth.

TTFT 200 ms, a chunk every 20 ms with 3 tokens, 128 output tokens, 32 reasoning tokens first,
at concurrency 128: servekit's mean ITL, TPOT and TTFO must be within 2% of the truth the
server recorded, and mean TTFT within 5% (the server's clock starts when it has read the
request). The truth is computed from the server's own send times with the same definitions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servekit.analyze.summarize import point_metrics
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.store import read_records
from servekit.bench.summary import run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SCRIPT = Path(__file__).with_name("scripted_server.py")
REASONING, TOKENS_PER_CHUNK, OUTPUT = 32, 3, 128
ATTEMPTS = 3  # runs of about 4 s each until the client certifies one


def truth(path: Path) -> dict[str, float]:
    ttft, ttfo, itl, tpot = [], [], [], []
    first_content_chunk = REASONING // TOKENS_PER_CHUNK  # the chunk holding token 33
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        read, sent = row["read_ns"], row["sent_ns"]
        tokens = [min(TOKENS_PER_CHUNK, OUTPUT - i * TOKENS_PER_CHUNK) for i in range(len(sent))]
        ttft.append((sent[0] - read) / 1e6)
        ttfo.append((sent[first_content_chunk] - read) / 1e6)
        for i in range(1, len(sent)):
            itl += [(sent[i] - sent[i - 1]) / 1e6 / tokens[i]] * tokens[i]
        tpot.append((sent[-1] - sent[0]) / 1e6 / (OUTPUT - 1))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {"ttft": mean(ttft), "ttfo": mean(ttfo), "itl": mean(itl), "tpot": mean(tpot)}


def test_accuracy_at_concurrency_128(tmp_path: Path, start_script: Callable[..., Any]) -> None:
    """Reported ITL, TPOT, TTFO within 2% and TTFT within 5% of the server's truth.

    The bounds hold for a run the client certifies as valid. A run it flags (event-loop lag
    or CPU saturation from other load on this 2-core machine) is measured again, up to
    ATTEMPTS runs; when the host stays that loaded, what is asserted is that the client said
    so on every run, and the accuracy is skipped, not asserted on figures the client itself
    disowned. Measured on the Xeon host (2026-12-07), mean ITL against the truth: quiet,
    +0.11% to +0.24% (15 runs); two CPU burners beside it, +0.19% to +0.42%, every run
    certified (loop lag p99 4-8 ms). Before records and launches took turns (bench/turns.py),
    +0.27% to +0.46% quiet, and one certified run of a fresh-clone gate +2.2% (the first
    wave's last chunks stamped 18 ms late behind 128 launches).
    """
    flagged = []
    for attempt in range(ATTEMPTS):
        truth_file = tmp_path / f"truth{attempt}.jsonl"
        server = start_script(str(SCRIPT), str(truth_file))
        spec = BenchSpec(server.url, "scripted", "chat", 8, OUTPUT, 0.0, 256, warmup=0)
        out = tmp_path / f"run{attempt}"
        # Server and client each get a core, as the ceiling benchmark runs them: sharing
        # both cores, their scheduling moved TTFO by up to +2.2% in one CI run of four.
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(server.pid, {1})
        os.sched_setaffinity(0, {0})
        try:
            summary = run_bench(spec, [PointSpec("c=128", concurrency=128)], out, version="t")
        finally:
            os.sched_setaffinity(0, mine)
        client = summary.points[0].client
        m = point_metrics(read_records(out))
        assert m.completed == 256  # exact whatever the host does
        if client.valid:
            break
        assert client.warnings, client  # an invalid run says why
        flagged.append("; ".join(client.warnings))
    else:
        pytest.skip(f"the host was too loaded for the client to certify any of {ATTEMPTS} "
                    f"runs ({' | '.join(flagged)}): accuracy not checkable here")  # fmt: skip
    true = truth(truth_file)
    assert m.itl_ms.mean == pytest.approx(true["itl"], rel=0.02)
    assert m.tpot_ms.mean == pytest.approx(true["tpot"], rel=0.02)
    assert m.ttfo_ms.mean == pytest.approx(true["ttfo"], rel=0.02)
    assert m.ttft_ms.mean == pytest.approx(true["ttft"], rel=0.05)
