"""Prometheus metrics of the live simulator (shell): vLLM's `vllm:*` series.

Gauges and counters are read from the engine at scrape time; the latency histograms are
observed as tokens are delivered, on the simulated clock (the sum of step durations since
the request arrived), so a sped-up simulator reports the latencies of the GPUs it models,
free of event-loop jitter. Each server has its own
registry, so several servers in one process never share series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from servekit.sim.engine import Engine

# vLLM V1's bucket edges (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _EngineCollector(Collector):
    """Engine state and counters, read at each scrape."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self._engine = engine
        self._model = model_name

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["model_name"])
        family.add_metric([self._model], value)
        return family

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["model_name"])
        family.add_metric([self._model], value)
        return family

    def collect(self) -> Iterator[Metric]:
        """Yield the current value of every engine series."""
        engine = self._engine
        stats = engine.stats
        yield self._gauge(
            "vllm:num_requests_running", "Requests in model execution batches.", len(engine.running)
        )
        yield self._gauge(
            "vllm:num_requests_waiting", "Requests waiting to be processed.", len(engine.waiting)
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            engine.kv_usage,
        )
        yield self._counter(
            "vllm:num_preemptions", "Cumulative number of preemptions.", stats.preemptions
        )
        yield self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens
        )
        yield self._counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            stats.generation_tokens,
        )
        # vLLM counts prefix-cache lookups of new requests only, in tokens, at admission.
        yield self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats.prefix_cache_queries,
        )
        yield self._counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            stats.prefix_cache_hits,
        )
        if not engine.limits.num_speculative_tokens:
            return
        yield self._counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", stats.drafts
        )
        yield self._counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", stats.draft_tokens
        )
        yield self._counter(
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens.",
            stats.accepted_tokens,
        )
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=["model_name", "position"],
        )
        for position, count in enumerate(stats.accepted_per_position):
            per_pos.add_metric([self._model, str(position)], count)
        yield per_pos


class ServerMetrics:
    """The `/metrics` registry of one simulated server."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_EngineCollector(engine, model_name))
        self._model = model_name
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            ["model_name"],
            registry=self.registry,
            buckets=TTFT_BUCKETS,
        ).labels(model_name)
        self._itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ["model_name"],
            registry=self.registry,
            buckets=ITL_BUCKETS,
        ).labels(model_name)

    def observe_success(self, finish_reason: str) -> None:
        """Count a request whose whole answer reached its client."""
        self._success.labels(self._model, finish_reason).inc()

    def observe_first_token(self, seconds: float) -> None:
        """Record one request's time to first token (simulated seconds)."""
        self._ttft.observe(seconds)

    def observe_inter_token(self, seconds: float) -> None:
        """Record the gap between two chunks of one request (simulated seconds)."""
        self._itl.observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every series."""
        return generate_latest(self.registry)
