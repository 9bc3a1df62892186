"""servekit report's traffic parts: prefix cache, sessions, schedule and the per-turn TTFT
plot appear for a run with sessions and a replay, escaped, and not at all for a plain run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from matplotlib.image import imread
from rich.console import Console

from servekit.analyze.compare import compare_runs
from servekit.analyze.summarize import point_metrics, point_to_json, summary_document
from servekit.analyze.traffic import ScheduleBound, traffic_blocks, with_traffic
from servekit.bench.store import RECORDS_FILE, read_summary, write_summary
from servekit.records import RequestRecord
from servekit.report.build import write_report
from servekit.report.tables import compare_table
from servekit.results.summary import ServerBlock, SummaryPoint, Target, Workload

MS = 1_000_000
HOSTILE = "<script>alert(1)</script>"
LABEL = "sess<img src=x onerror=alert(1)>"  # a directory name (no slash)


def _rec(
    rid: str, point: str, sent_ms: int, chunks_ms: tuple[int, ...], *,
    scheduled_ms: int | None = None, **session: str | int,
) -> RequestRecord:  # fmt: skip
    times = tuple(t * MS for t in chunks_ms)
    record = RequestRecord(
        id=rid, point=point, scheduled_ns=(sent_ms if scheduled_ms is None else scheduled_ms) * MS,
        sent_ns=sent_ms * MS, first_token_ns=times[0], first_answer_ns=times[0],
        end_ns=times[-1], chunk_ns=times, chunk_tokens=tuple(1 for _ in times),
        prompt_tokens=600, output_tokens=len(times),
    )  # fmt: skip
    return dataclasses.replace(record, **session)  # type: ignore[arg-type]


def _point(
    records: list[RequestRecord], concurrency: int | None, bound: ScheduleBound | None = None
) -> SummaryPoint:
    metrics = point_metrics(records)
    server = ServerBlock(prefix_cache_queries=4800, prefix_cache_hits=1536)
    point = point_to_json(metrics, concurrency=concurrency, rate_rps=None, server=server)
    blocks = traffic_blocks(records, server, duration_s=metrics.duration_s, schedule=bound)
    return with_traffic(point, blocks)


def _write_run(run_dir: Path, points: list[SummaryPoint], records: list[RequestRecord]) -> Path:
    run_dir.mkdir()
    workload = Workload(input_len=600, output_len=4, temperature=0.0, requests_per_point=4, seed=0)
    target = Target(url=None, model=HOSTILE, server_version=None, profile=None)
    summary = summary_document(
        servekit_version="0", started_at="now", target=target, workload=workload, points=points
    )
    write_summary(run_dir, summary)
    (run_dir / RECORDS_FILE).write_text("".join(r.to_json_line() + "\n" for r in records))
    return run_dir


def _traffic_run(base: Path) -> Path:
    sessions = [
        _rec("a1", "c=2", 0, (40, 50), session="a", turn=1, cached_tokens=0),
        _rec("b1", "c=2", 5, (60, 70), session="b", turn=1, cached_tokens=0),
        _rec("a2", "c=2", 100, (120, 130), session="a", turn=2, cached_tokens=512,
             session_end="completed", tool_calls=1, tool_args_invalid=1),
        _rec("b2", "c=2", 110, (140, 150), session="b", turn=2, cached_tokens=512,
             session_end="completed"),
    ]  # fmt: skip
    replay = [
        _rec(f"t{i}", "trace", at + 1, (at + 9,), scheduled_ms=at) for i, at in enumerate((0, 50))
    ]
    points = [_point(sessions, 2), _point(replay, None, ScheduleBound(2, 10.0))]
    return _write_run(base / LABEL, points, sessions + replay)


def _plain_run(base: Path) -> Path:
    records = [_rec("p1", "c=1", 0, (10, 20)), _rec("p2", "c=1", 30, (40, 50))]
    metrics = point_metrics(records)
    point = point_to_json(metrics, concurrency=1, rate_rps=None)
    return _write_run(base / "plain", [point], records)


def test_a_traffic_run_gets_its_sections_and_the_turn_plot(tmp_path: Path) -> None:
    """Prefix cache, sessions and schedule sections and ttft_by_turn.png, all escaped."""
    run = _traffic_run(tmp_path)
    written = write_report([run], tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    for title in ("Prefix cache", "Sessions and agent loops", "Schedule", "TTFT by turn index"):
        assert title in page
        assert title in markdown
    assert HOSTILE not in page
    assert LABEL not in page
    assert "sess&lt;img src=x onerror=alert(1)&gt;: prefix cache" in page
    assert "<td>32.00%</td>" in page  # server hit rate 1536 / 4800
    assert "<td>2/2</td>" in page  # the traffic table's sessions cell: all completed
    assert "<td>yes</td>" in page  # the replay kept its schedule (lag 1 ms)
    plot = tmp_path / "out" / "ttft_by_turn.png"
    assert str(plot) in written.plots
    assert imread(str(plot)).shape[0] > 100


def test_a_plain_run_has_none_of_them(tmp_path: Path) -> None:
    """A single-turn run without prefix-cache figures has no traffic section or plot."""
    written = write_report([_plain_run(tmp_path)], tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    for title in ("Prefix cache", "Sessions and agent loops", "Schedule", "TTFT by turn",
                  "traffic per load"):  # fmt: skip
        assert title not in page
    assert not any(Path(p).name == "ttft_by_turn.png" for p in written.plots)


def test_compare_of_two_replays_shows_the_traffic_figures(tmp_path: Path) -> None:
    """--compare of two traffic runs pairs their points and lists A and B traffic figures."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = _traffic_run(tmp_path / "a"), _traffic_run(tmp_path / "b")
    write_report([a, b], tmp_path / "out", compare=(a, b))
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "traffic figures, A and B" in page
    assert "<td>trace</td><td>schedule.lag_ms.p99</td>" in page
    hit = "<td>c=2</td><td>prefix_cache.server_hit_rate</td><td>32.0%</td><td>32.0%</td>"
    assert hit + "<td>+0.0 pp (within noise)</td>" in page


def test_terminal_compare_table_shows_traffic_figures_side_by_side(tmp_path: Path) -> None:
    """compare's table gains `A -> B` columns for the traffic figures either run has."""
    (tmp_path / "a").mkdir()
    a = read_summary(_traffic_run(tmp_path / "a"))
    b = a.model_copy(update={"points": [a.points[0], a.points[1]]})
    plain = read_summary(_plain_run(tmp_path))
    console = Console(width=400, record=True)
    console.print(compare_table(compare_runs(a, b).points, title="t"))
    text = console.export_text()
    assert "server hit A -> B" in text
    assert "32.0% -> 32.0%" in text  # a share in percent
    assert "turns/s A -> B" in text
    assert "26.67 -> 26.67" in text
    assert "25 -> 25 (turn 2)" in text  # the last turn both runs have, named
    assert "lag p99 ms A -> B" in text
    console = Console(width=400, record=True)
    console.print(compare_table(compare_runs(plain, plain).points, title="t"))
    assert "A -> B" not in console.export_text()
