"""Multi-turn sessions in bench, against the live simulator and a failing server."""

from __future__ import annotations

import itertools
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

if str(Path(__file__).parent) not in sys.path:  # session_helpers sits beside this file
    sys.path.insert(0, str(Path(__file__).parent))

from session_helpers import SIM_PROFILE, Sim, Sweep, sim_server, sweep

import servekit.bench.sessions as bench_sessions
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.store import read_records
from servekit.cli.main import cli
from servekit.profiles import load_profile
from servekit.records import RequestRecord
from servekit.sim.build import build_engine
from servekit.sim.sweep import simulate_sweep
from servekit.sim.traffic import SessionsPoint
from servekit.workload.sessions import (
    AgentSpec,
    Delay,
    SessionPlan,
    SessionsSpec,
    Turn,
    draw_delay,
    session_rng,
)

pytestmark = pytest.mark.integration
FAULTY = Path(__file__).with_name("faulty_server.py")
SCRIPTED = Path(__file__).with_name("scripted_server.py")
SYSTEM = "You answer briefly."


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    """One simulator for the module."""
    with sim_server() as server:
        yield server


def synthetic(
    count: int, turns: int, *, input_len: int = 20, output_len: int = 8, system: str | None = None
) -> tuple[SessionPlan, ...]:
    """`count` synthetic sessions of `turns` turns each."""
    return tuple(
        SessionPlan(f"s{i}", tuple(Turn(None, output_len, input_len) for _ in range(turns)), system)
        for i in range(count)
    )


def bench_spec(sim: Sim, plans: tuple[SessionPlan, ...], **kw: Any) -> BenchSpec:
    """A session run of `plans` against the simulator."""
    think = kw.pop("think", Delay(0.0))
    per_point = kw.pop("per_point", len(plans))
    sessions = SessionsSpec(plans, "synthetic", think, per_point)
    return BenchSpec(base_url=sim.url, model=sim.model, sessions=sessions, seed=7, **kw)


@pytest.fixture(scope="module")
def closed(sim: Sim, tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """Two sessions of three synthetic turns with a system message, two at a time."""
    spec = bench_spec(sim, synthetic(2, 3, system=SYSTEM))
    return sweep(spec, [PointSpec("c=2", concurrency=2)], tmp_path_factory.mktemp("closed"))


def overlap(sessions: dict[str, list[RequestRecord]]) -> int:
    """The most sessions in flight at once (first send to last end)."""
    edges = []
    for records in sessions.values():
        edges += [(records[0].sent_ns, 1), (records[-1].end_ns, -1)]
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        now += step
        most = max(most, now)
    return most


def test_records_per_session_are_its_turns(closed: Sweep) -> None:
    """Every request is one record, written and seen as it ended; turns count 1..3 and only
    the last says the session completed."""
    (outcome,) = closed.run.outcomes
    assert closed.run.stopped is None
    assert sorted(r.id for r in closed.written) == sorted(r.id for r in outcome.records)
    assert [r.id for r in closed.seen] == [r.id for r in outcome.records]
    sessions = closed.sessions()
    assert sorted(sessions) == ["s0", "s1"]
    for records in sessions.values():
        assert [r.turn for r in records] == [1, 2, 3]
        assert [r.session_end for r in records] == [None, None, "completed"]
        assert all(r.ok and r.output_tokens == 8 and r.tool_calls == 0 for r in records)
    # lengths as asked, and the server generated exactly the tokens the client counted
    assert not [w for w in outcome.warnings if "output length" in w or "generated" in w]


def test_each_turn_sends_the_history_that_came_back(closed: Sweep) -> None:
    """Turn k sends the system message, every earlier user message and the assistant text
    that streamed back, then the new user message; lengths are pinned with ignore_eos."""
    firsts = {e.body["messages"][1]["content"] for e in closed.exchanges}
    assert len(firsts) == 2
    for first in firsts:
        exchanges = closed.exchanges_of(first)
        assert len(exchanges) == 3
        expected: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for index, exchange in enumerate(exchanges):
            sent = exchange.body["messages"]
            assert sent[:-1] == expected
            assert sent[-1]["role"] == "user"
            assert exchange.body["max_tokens"] == 8
            assert exchange.body["ignore_eos"] is True
            assert "tools" not in exchange.body
            expected = [*sent, {"role": "assistant", "content": exchange.content()}]
            assert exchange.content(), f"turn {index + 1} streamed no text"
        users = [m["content"] for m in exchanges[-1].body["messages"] if m["role"] == "user"]
        assert len(set(users)) == 3  # distinct synthetic text per turn


def test_prompt_tokens_grow_by_the_answer_and_the_new_turn(sim: Sim, closed: Sweep) -> None:
    """Each turn's server prompt count is the /tokenize count of the messages it sent, and
    grows from the previous turn by exactly its output, the new user text (sized to 20
    tokens as plain text) and the template's tokens for the two new messages."""
    template = (
        sim.tokens({"messages": [
            {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ]})
        - sim.tokens({"messages": [{"role": "user", "content": "a"}]})
        - sim.tokens({"prompt": "b"}) - sim.tokens({"prompt": "c"})
    )  # fmt: skip
    by_prompt = {
        sim.tokens({"messages": e.body["messages"]}): e.body["messages"] for e in closed.exchanges
    }
    for records in closed.sessions().values():
        assert all(r.prompt_tokens in by_prompt for r in records)
        for before, after in itertools.pairwise(records):
            user = by_prompt[after.prompt_tokens][-1]["content"]
            assert sim.tokens({"prompt": user}) == 20
            assert (
                after.prompt_tokens == before.prompt_tokens + before.output_tokens + 20 + template
            )


def test_closed_loop_keeps_at_most_c_sessions_in_flight(sim: Sim, tmp_path: Path) -> None:
    """With concurrency 2 and five sessions, two sessions run at once, never three; each
    worker starts its next session only after its previous one ended."""
    spec = bench_spec(sim, synthetic(5, 2, output_len=4), think=Delay(0.02))
    run = sweep(spec, [PointSpec("c=2", concurrency=2)], tmp_path)
    sessions = run.sessions()
    assert len(sessions) == 5
    assert all(len(r) == 2 for r in sessions.values())
    assert overlap(sessions) == 2


def test_open_loop_starts_sessions_on_schedule(sim: Sim, tmp_path: Path) -> None:
    """At 20 sessions/s (constant arrivals) session i is due 50 ms after session i-1 and is
    not sent before it is due; sessions longer than 50 ms overlap, and --max-concurrency 1
    holds each back until the previous one ended."""
    spec = bench_spec(sim, synthetic(4, 2, output_len=64), think=Delay(0.05))
    for cap in (None, 1):
        point = PointSpec("rate=20", rate_rps=20.0, arrival="constant", max_concurrency=cap)
        sessions = sweep(spec, [point], tmp_path / str(cap)).sessions()
        ordered = [sessions[f"s{i}"] for i in range(4)]
        starts = [records[0].scheduled_ns for records in ordered]
        assert all(abs(b - a - 50_000_000) <= 1 for a, b in itertools.pairwise(starts))
        assert all(r.sent_ns >= r.scheduled_ns for recs in ordered for r in recs)
        if cap is None:
            assert overlap(sessions) >= 2
        else:
            assert overlap(sessions) == 1
            assert all(b[0].sent_ns >= a[-1].end_ns for a, b in itertools.pairwise(ordered))


def test_think_time_delays_the_next_turn(sim: Sim, tmp_path: Path) -> None:
    """A 0.2 s think time: each later turn is due at least 0.2 s after the previous answer
    ended, and is not sent before it is due."""
    spec = bench_spec(sim, synthetic(2, 3, output_len=4), think=Delay(0.2))
    for records in sweep(spec, [PointSpec("c=2", concurrency=2)], tmp_path).sessions().values():
        for before, after in itertools.pairwise(records):
            assert after.scheduled_ns - before.end_ns >= 200_000_000
            assert after.sent_ns >= after.scheduled_ns


def test_point_deadline_stops_sessions(sim: Sim, tmp_path: Path) -> None:
    """With a 0.6 s point and 0.25 s think time, a ten-turn session stops early: no request
    is sent after the deadline and its last record says "stopped"."""
    spec = bench_spec(
        sim, synthetic(1, 10, output_len=4), think=Delay(0.25), duration_per_point_s=0.6
    )
    (records,) = sweep(spec, [PointSpec("c=1", concurrency=1)], tmp_path).sessions().values()
    assert 1 < len(records) < 10
    assert [r.session_end for r in records] == [None] * (len(records) - 1) + ["stopped"]
    assert records[-1].sent_ns - records[0].scheduled_ns < 600_000_000


def test_a_failed_turn_ends_its_session(tmp_path: Path, start_script: Callable[..., Any]) -> None:
    """Against a server whose first stream is good, second malformed and third cut mid
    chunk: one session fails at turn 1, the other at turn 2 when its connection drops; each
    failure is classified and ends its session "failed", and the sweep returns normally."""
    url = start_script(str(FAULTY)).url
    plans = tuple(SessionPlan(n, (Turn("hello", 2), Turn("again", 2))) for n in ("a", "b"))
    sessions = SessionsSpec(plans, "jsonl test", Delay(0.0), 2)
    spec = BenchSpec(  # no token-ids probe: it would take the server's first answer
        base_url=url, model="faulty", sessions=sessions, timeout_s=5.0, token_ids=False
    )
    run = sweep(spec, [PointSpec("c=2", concurrency=2)], tmp_path)
    assert run.run.stopped is None
    shapes = sorted(
        [
            [(r.turn, r.error_kind, r.session_end) for r in records]
            for records in run.sessions().values()
        ],
        key=len,
    )
    assert shapes == [
        [(1, "malformed_chunk", "failed")],
        [(1, None, None), (2, "stream_cut", "failed")],
    ]
    assert len(run.written) == 3


def test_repeated_sessions_get_their_own_ids_and_first_messages(sim: Sim, tmp_path: Path) -> None:
    """Two points of two sessions from two conversations: the second point sends them again
    as a#2 and b#2, whose first user message starts "[round 2] " (so their first turn is no
    copy of an earlier one), and the rest of each conversation unchanged."""
    plans = tuple(
        SessionPlan(name, (Turn(f"tell me about {name}", 4), Turn("and then?", 4)))
        for name in ("a", "b")
    )
    spec = bench_spec(sim, plans, per_point=2)
    points = [PointSpec("c=1", concurrency=1), PointSpec("c=2", concurrency=2)]
    run = sweep(spec, points, tmp_path)
    by_point = [sorted({r.session for r in o.records if r.session}) for o in run.run.outcomes]
    assert by_point == [["a", "b"], ["a#2", "b#2"]]
    firsts = sorted(
        e.body["messages"][0]["content"] for e in run.exchanges if len(e.body["messages"]) == 1
    )
    assert firsts == [
        "[round 2] tell me about a",
        "[round 2] tell me about b",
        "tell me about a",
        "tell me about b",
    ]
    seconds = [
        e.body["messages"][2]["content"] for e in run.exchanges if len(e.body["messages"]) == 3
    ]
    assert seconds == ["and then?"] * 4


RUN_SESSIONS = """
import sys
from pathlib import Path
from servekit.bench.spec import BenchSpec, PointSpec
from servekit.bench.summary import run_bench
from servekit.errors import Interrupted
from servekit.workload.sessions import (
    AgentSpec,
    Delay,
    SessionPlan,
    SessionsSpec,
    Turn,
    draw_delay,
)
plans = tuple(SessionPlan(f"s{i}", tuple(Turn(None, 16, 20) for _ in range(6))) for i in range(40))
sessions = SessionsSpec(plans, "synthetic", Delay(0.05), 40)
spec = BenchSpec(base_url=sys.argv[1], model="", sessions=sessions)
try:
    run_bench(spec, [PointSpec("c=4", concurrency=4)], Path(sys.argv[2]), version="test")
except Interrupted as exc:
    print(exc.message, file=sys.stderr)
    sys.exit(exc.exit_code)
"""


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_sessions_keep_their_records(
    sim: Sim, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """Ctrl-C or SIGTERM mid-point: the run exits 130/143, every record written parses and
    the summary's point covers exactly those records."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_SESSIONS, sim.url, str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    records_file = out / "records.jsonl"
    for _ in range(600):
        if records_file.is_file() and records_file.read_bytes().count(b"\n") >= 10:
            break
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err.decode()
    records = read_records(out)
    assert len(records) >= 10
    assert all(r.session is not None and r.turn is not None for r in records)
    point = json.loads((out / "summary.json").read_text(encoding="utf-8"))["points"][0]
    assert point["completed"] + point["failed"] == len(records)


def test_output_length_checked_except_in_agent_loops(
    tmp_path: Path, start_script: Callable[..., Any]
) -> None:
    """A server that always answers 128 tokens (32 of reasoning): session turns that asked
    for 200 are flagged as short, agent turns (where 200 is only a cap) are not, and only
    the answer's content is sent back."""
    url = start_script(str(SCRIPTED), str(tmp_path / "truth.jsonl")).url
    plans = (SessionPlan("a", (Turn("hello", 200), Turn("again", 200))),)
    warnings = {}
    for name, agent in (("chat", None), ("agent", AgentSpec((), Delay(0.0), "ok", 4))):
        sessions = SessionsSpec(plans, "jsonl test", Delay(0.0), 1, agent)
        spec = BenchSpec(base_url=url, model="scripted", sessions=sessions)
        run = sweep(spec, [PointSpec("c=1", concurrency=1)], tmp_path / name)
        (records,) = run.sessions().values()
        assert [(r.output_tokens, r.session_end) for r in records] == [
            (128, None),
            (128, "completed"),
        ]
        warnings[name] = run.run.outcomes[0].warnings
        # the answer's 96 content tokens go back; its 32 reasoning tokens do not
        assert run.exchanges[1].body["messages"][1] == {"role": "assistant", "content": " c" * 96}
    assert warnings["chat"][0] == (
        "2 request(s) did not get the output length asked for (e.g. 128 of 200 tokens): "
        "the server ignored max_tokens/min_tokens/ignore_eos"
    )
    assert all("output length" not in w for w in warnings["agent"])


def test_a_dead_server_stops_the_sweep(tmp_path: Path) -> None:
    """A simulator whose engine dies when it batches three requests: the c=4 session point
    fails, /health no longer answers 200, and the sweep stops before its next point with
    the reason; every session of the point ended, the failed ones "failed"."""
    with sim_server("--fault", "crash-at-concurrency=3") as dying:
        spec = bench_spec(dying, synthetic(4, 2, output_len=16), timeout_s=10.0)
        points = [PointSpec("c=4", concurrency=4), PointSpec("c=1", concurrency=1)]
        run = sweep(spec, points, tmp_path)
    assert run.run.stopped is not None
    assert "stopped answering /health during c=4" in run.run.stopped.message
    assert [o.spec.label for o in run.run.outcomes] == ["c=4"]
    sessions = run.sessions()
    assert len(sessions) == 4
    for records in sessions.values():
        assert records[-1].session_end in ("failed", "completed")
        assert all(r.session_end is None for r in records[:-1])
        assert (records[-1].session_end == "failed") == (not records[-1].ok)
    assert any(not r.ok for recs in sessions.values() for r in recs)


def test_bench_cli_runs_synthetic_sessions(sim: Sim, tmp_path: Path) -> None:
    """`servekit bench --turns 2 --sessions 3` runs three two-turn sessions per point, each
    turn's new text sized to --input-len tokens as plain text, as the summary says."""
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, [
        "bench", "--url", sim.url, "--turns", "2", "--sessions", "3", "--concurrency", "2",
        "--input-len", "12", "--output-len", "4", "--out", str(out), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["workload"]["input_len_method"] == (
        "server /tokenize (each turn's new user text, as plain text)"
    )
    records = read_records(out)
    assert sorted((r.session, r.turn, r.session_end) for r in records) == [
        (s, t, "completed" if t == 2 else None) for s in ("s1", "s2", "s3") for t in (1, 2)
    ]


def test_think_times_are_drawn_per_session_from_the_seed(sim: Sim, tmp_path: Path) -> None:
    """Exponential think times: session i draws from its own RNG, of the run's seed and its
    position only, so each later turn is due at least its drawn time (and not much more)
    after the previous answer, however the sessions interleave."""
    plans = tuple(
        SessionPlan(f"t{i}", tuple(Turn(f"question {i}.{k}", 4) for k in range(4)))
        for i in range(2)
    )
    spec = bench_spec(sim, plans, think=Delay(0.1, "exponential"))
    sessions = sweep(spec, [PointSpec("c=2", concurrency=2)], tmp_path).sessions()
    for i in range(len(plans)):
        own = session_rng(spec.seed, i)
        drawn = [draw_delay(Delay(0.1, "exponential"), own) for _ in range(3)]
        records = sessions[f"t{i}"]
        gaps = [b.scheduled_ns - a.end_ns for a, b in itertools.pairwise(records)]
        assert len(set(drawn)) == 3
        for gap, want in zip(gaps, drawn, strict=True):
            assert int(want * 1e9) <= gap < int(want * 1e9) + 20_000_000


def test_bench_and_the_simulator_draw_the_same_delays(
    sim: Sim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Synthetic sessions (sizing their text takes draws from the run's RNG) with
    exponential think times, over two points: every delay bench draws is, session by
    session, the simulator's gap between the session's answer and its next turn, and an
    open-loop point's session arrivals are the simulator's too."""
    think = Delay(0.02, "exponential")
    plans = synthetic(3, 3, input_len=12, output_len=4)
    spec = bench_spec(sim, plans, think=think, per_point=3)
    drawn: dict[int, list[float]] = {}
    kept: list[random.Random] = []

    def spy(delay: Delay, rng: random.Random) -> float:
        value = draw_delay(delay, rng)
        kept.append(rng)  # alive, so no later RNG reuses its id
        drawn.setdefault(id(rng), []).append(value)
        return value

    monkeypatch.setattr(bench_sessions, "draw_delay", spy)
    points = [PointSpec("c=2", concurrency=2), PointSpec("rate=50", rate_rps=50.0)]
    bench = sweep(spec, points, tmp_path)
    assert spec.sessions is not None
    sim_points = [
        SessionsPoint("c=2", spec.sessions, 0, concurrency=2),
        SessionsPoint("rate=50", spec.sessions, 3, rate_rps=50.0),
    ]
    profile = load_profile(SIM_PROFILE)
    results = simulate_sweep(lambda s: build_engine(profile, seed=s), sim_points, seed=spec.seed)
    sim_gaps = []
    for result in results:
        by_session: dict[str, list[RequestRecord]] = {}
        for r in result.run.records:
            by_session.setdefault(r.session or "", []).append(r)
        for records in by_session.values():
            records.sort(key=lambda r: r.turn or 0)
            sim_gaps.append([b.scheduled_ns - a.end_ns for a, b in itertools.pairwise(records)])
    bench_gaps = [[round(d * 1e9) for d in values] for values in drawn.values()]
    assert len(bench_gaps) == 6
    assert sorted(bench_gaps) == sorted(sim_gaps)
    assert len({g for gaps in sim_gaps for g in gaps}) == 12  # drawn, not fixed
    bench_starts = sorted(r.scheduled_ns for r in bench.run.outcomes[1].records if r.turn == 1)
    sim_starts = sorted(r.scheduled_ns for r in results[1].run.records if r.turn == 1)
    assert [b - bench_starts[0] for b in bench_starts] == [t - sim_starts[0] for t in sim_starts]
