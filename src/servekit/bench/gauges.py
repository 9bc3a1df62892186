"""Server gauges sampled during a point (shell, asyncio): vLLM's KV-cache usage and its
running and waiting requests, scraped from `/metrics` every `--metrics-interval` while the
point runs: their maxima for the server block, and samples over time for the plots.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from servekit.bench.scrape import scrape
from servekit.client.endpoint import Endpoint

SAMPLE_EVERY_S = 0.25

GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")


async def sample_gauges(
    endpoint: Endpoint,
    maxima: dict[str, float],
    stop: asyncio.Event,
    samples: list[list[float]],
    every_s: float = SAMPLE_EVERY_S,
    problems: set[str] | None = None,
) -> None:
    """Scrape /metrics every `every_s` (`--metrics-interval`): gauge maxima, and (seconds
    since the point started, KV usage, running, waiting) samples for plots over time; what
    was wrong with a scrape goes to `problems`."""
    start = time.monotonic()
    while not stop.is_set() and every_s > 0:
        snap = await scrape(endpoint)
        if snap is not None and snap.problem is not None and problems is not None:
            problems.add(snap.problem)
        if snap is not None:
            for name, value in snap.gauges.items():
                maxima[name] = max(maxima.get(name, value), value)
            if all(g in snap.gauges for g in GAUGES):
                values = [snap.gauges[g] for g in GAUGES]
                samples.append([round(time.monotonic() - start, 3), *values])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
