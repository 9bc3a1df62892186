"""Scrape vLLM's Prometheus /metrics (shell fetch through `client.Endpoint` + pure parse with
prometheus-client).

A scrape never fails a run: text that is not UTF-8 or not Prometheus text, and values that
are not finite (NaN, infinity), are dropped and named in `Snapshot.problem`, which the
caller turns into a warning on the point. It says which server figures are missing; the
client's own timing does not depend on /metrics, so it stays valid.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from servekit.results.summary import ServerBlock

if TYPE_CHECKING:
    from servekit.client.endpoint import Endpoint

COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:num_preemptions",
    "vllm:generation_tokens",
    "vllm:prompt_tokens",
    "vllm:prefix_cache_queries",  # tokens looked up in the prefix cache (new requests)
    "vllm:prefix_cache_hits",  # of those, tokens found there
)
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
MISSING = ": the point's server figures are missing (the client's timing is unaffected)"
"""What a scrape that could not be read means for the point."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Counter totals and gauge values at one moment (summed over label sets), and the
    accepted draft tokens per position."""

    counters: dict[str, float]
    gauges: dict[str, float]
    per_position: dict[int, float] | None = None
    problem: str | None = None


_WANTED = re.compile(
    r"^(?:# (?:HELP|TYPE) )?(?:"
    + "|".join(
        re.escape(n) for n in sorted((*COUNTERS, *GAUGES, PER_POSITION), key=len, reverse=True)
    )
    + r")(?:_total)?(?:[{ \t]|$)"
)


def wanted_lines(text: str) -> str:
    """The lines of Prometheus text that belong to the families servekit reads.

    vLLM's page is ~55 kB, mostly histogram buckets servekit does not read; the parser
    takes ~20 ms over all of it, long enough to stall the event loop that times the
    streams (measured: the loop's p99 lag went from 1.2 ms to 18-29 ms at 0.5 s scrapes).
    Filtering first keeps the parse under a millisecond; malformed lines of the wanted
    families still reach the parser and are reported as before.
    """
    return "\n".join(line for line in text.splitlines() if _WANTED.match(line)) + "\n"


def parse_metrics(text: str) -> Snapshot:
    """Parse Prometheus text into the counters and gauges servekit uses; bad text -> empty
    (with the problem named), non-finite values are left out (and named)."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    per_position: dict[int, float] = {}
    try:
        families = list(text_string_to_metric_families(wanted_lines(text)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        return Snapshot({}, {}, problem=f"/metrics is not Prometheus text ({type(exc).__name__})"
                        f"{MISSING}")  # fmt: skip
    not_finite: set[str] = set()
    for family in families:
        name = family.name  # counters lose their _total suffix in the parser
        for sample in family.samples:
            if not math.isfinite(sample.value):
                if name in COUNTERS or name in GAUGES or name == PER_POSITION:
                    not_finite.add(name)
                continue
            if name == PER_POSITION and sample.name == f"{name}_total":
                position = sample.labels.get("position", "")
                if position.isdigit():
                    key = int(position)
                    per_position[key] = per_position.get(key, 0.0) + float(sample.value)
                continue
            if name in COUNTERS and sample.name in (name, f"{name}_total"):
                counters[name] = counters.get(name, 0.0) + float(sample.value)
            elif name in GAUGES and sample.name == name:
                gauges[name] = gauges.get(name, 0.0) + float(sample.value)
    problem = None
    if not_finite:
        for name in not_finite:  # a family with a NaN sample has no trustworthy sum
            counters.pop(name, None)
            gauges.pop(name, None)
        problem = (
            f"/metrics gave non-finite values for {', '.join(sorted(not_finite))}: those "
            "server figures are missing (the client's timing is unaffected)"
        )
    return Snapshot(counters, gauges, per_position or None, problem)


async def scrape(endpoint: Endpoint) -> Snapshot | None:
    """Fetch and parse /metrics; None when the server has no usable metrics endpoint."""
    body = await endpoint.metrics()
    if body is None:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Snapshot({}, {}, problem=f"/metrics is not UTF-8 (byte {exc.start}){MISSING}")
    return parse_metrics(text)


def server_block(
    before: Snapshot | None, after: Snapshot | None, gauge_max: dict[str, float]
) -> ServerBlock:
    """The summary's `server` block from counter deltas around a point and gauge maxima."""

    def delta(name: str) -> float | None:
        if before is None or after is None or name not in after.counters:
            return None
        return after.counters[name] - before.counters.get(name, 0.0)

    drafts = delta("vllm:spec_decode_num_drafts")
    draft_tokens = delta("vllm:spec_decode_num_draft_tokens")
    accepted = delta("vllm:spec_decode_num_accepted_tokens")
    preemptions = delta("vllm:num_preemptions")
    per_position = None
    if before is not None and after is not None and after.per_position and drafts:
        start = before.per_position or {}
        per_position = [
            round((after.per_position[p] - start.get(p, 0.0)) / drafts, 4)
            for p in sorted(after.per_position)
        ]
    return ServerBlock(
        spec_acceptance_per_position=per_position,
        spec_acceptance_length=(1 + accepted / drafts) if drafts and accepted is not None else None,
        spec_acceptance_rate=(accepted / draft_tokens)
        if draft_tokens and accepted is not None
        else None,
        kv_cache_usage_max=gauge_max.get("vllm:kv_cache_usage_perc"),
        preemptions=int(preemptions) if preemptions is not None else None,
        running_max=int(gauge_max["vllm:num_requests_running"])
        if "vllm:num_requests_running" in gauge_max
        else None,
        waiting_max=int(gauge_max["vllm:num_requests_waiting"])
        if "vllm:num_requests_waiting" in gauge_max
        else None,
        generation_tokens=int(g) if (g := delta("vllm:generation_tokens")) is not None else None,
        prefix_cache_queries=_tokens(delta("vllm:prefix_cache_queries")),
        prefix_cache_hits=_tokens(delta("vllm:prefix_cache_hits")),
    )


def _tokens(value: float | None) -> int | None:
    """A token counter's delta; None when unknown or negative (the server restarted)."""
    return None if value is None or value < 0 else int(value)
