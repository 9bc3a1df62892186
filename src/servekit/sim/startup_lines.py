"""The simulator's startup log (core): the lines a vLLM 0.32 server prints while it starts.

`servekit sim serve` prints them, so whatever follows a real engine's log (the stages of
`servekit up`, `servekit logs analyze`) reads a simulated start the same way. The figures
are the ones the simulator itself runs with: servekit's memory plan for the profile
(weights, KV cache memory, KV capacity in tokens, maximum concurrency, CUDA-graph
memory), formatted as vLLM 0.32 formats them (GiB rounded to two places, token counts
with thousands separators, concurrency as `%.2fx`). The message texts follow the ones
`plan.startup_log` and `runtime.stages` match; the prefixes name the process that would
print each line (API server, engine core, worker).

A CPU host (the catalog's `cpu` device) says "CPU KV cache size" and captures no CUDA
graphs, as vLLM's CPU build; so does a profile with `enforce_eager`.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.plan import MemoryPlan
from servekit.profiles.schema import Profile
from servekit.units import GIB

__all__ = ["StartupFacts", "loaded_lines", "loading_lines", "serving_lines", "startup_facts"]

_API = "(APIServer pid=1) INFO"
_CORE = "(EngineCore pid=2) INFO"
_WORKER = "(Worker pid=3) INFO"


@dataclass(frozen=True, slots=True)
class StartupFacts:
    """What the startup log reports, from the plan the simulator sizes its KV pool with.

    Attributes:
        version: the vLLM version the profile names.
        model: the model path the engine loads.
        device: "GPU" or "CPU", as vLLM names the KV cache's device.
        weights_bytes: weights on one GPU.
        kv_cache_bytes: KV cache memory on one GPU.
        kv_cache_tokens: KV capacity in tokens.
        max_model_len: the longest request.
        max_concurrency: requests of max_model_len tokens the KV cache holds at once.
        graph_bytes: CUDA-graph memory (0 when no graphs are captured).
        piecewise_graphs: piecewise graphs captured.
        full_graphs: full graphs captured.
    """

    version: str
    model: str
    device: str
    weights_bytes: float
    kv_cache_bytes: float
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float
    graph_bytes: float
    piecewise_graphs: int
    full_graphs: int


def startup_facts(profile: Profile, plan: MemoryPlan, *, device_name: str) -> StartupFacts:
    """The facts of a simulated start.

    Args:
        profile: the deployment simulated.
        plan: servekit's memory plan for it (the simulator's KV pool).
        device_name: the catalog's device name of the profile's GPU (`cpu` on a CPU host).
    """
    cpu = device_name == "cpu"
    graphs = not cpu and not plan.inputs.enforce_eager
    return StartupFacts(
        version=profile.engine.version,
        model=profile.model.path,
        device="CPU" if cpu else "GPU",
        weights_bytes=plan.weights.total_bytes,
        kv_cache_bytes=plan.kv_cache_bytes,
        kv_cache_tokens=plan.kv_cache_tokens,
        max_model_len=plan.inputs.max_model_len,
        max_concurrency=plan.max_concurrency,
        graph_bytes=plan.graphs.total_bytes if graphs else 0.0,
        piecewise_graphs=len(plan.graphs.piecewise_sizes) if graphs else 0,
        full_graphs=len(plan.graphs.full_sizes) if graphs else 0,
    )


def loading_lines(facts: StartupFacts) -> list[str]:
    """The lines up to the start of weight loading (what a slow start shows while it waits)."""
    return [
        f"{_API} non-default args: {{'model': {facts.model!r}, "
        f"'max_model_len': {facts.max_model_len}}}",
        f"{_CORE} Initializing a V1 LLM engine (v{facts.version}) with config: "
        f"model={facts.model!r}",
        f"{_WORKER} Starting to load model {facts.model}...",
    ]


def loaded_lines(facts: StartupFacts, *, load_s: float) -> list[str]:
    """The lines from loaded weights to the KV cache and graph capture.

    Args:
        facts: the start's figures.
        load_s: seconds the (simulated) load took, as the log states it.
    """
    lines = [
        f"{_WORKER} Loading weights took {load_s:.2f} seconds",
        f"{_WORKER} Model loading took {_gib(facts.weights_bytes)} GiB memory and "
        f"{load_s:.6f} seconds",
        f"{_WORKER} Initial profiling/warmup run took 0.00 s",
    ]
    if facts.piecewise_graphs or facts.full_graphs:
        lines += [
            f"{_WORKER} Profiling CUDA graph memory: PIECEWISE={facts.piecewise_graphs}, "
            f"FULL={facts.full_graphs}",
            f"{_WORKER} Estimated CUDA graph memory: {facts.graph_bytes / GIB:.2f} GiB total",
        ]
    lines += [
        f"{_WORKER} Available KV cache memory: {_gib(facts.kv_cache_bytes)} GiB",
        f"{_CORE} {facts.device} KV cache size: {facts.kv_cache_tokens:,} tokens, Maximum "
        f"concurrency for {facts.max_model_len:,} tokens per request: "
        f"{facts.max_concurrency:.2f}x",
    ]
    if facts.piecewise_graphs or facts.full_graphs:
        lines.append(
            f"{_WORKER} Graph capturing finished in 0 secs, took {facts.graph_bytes / GIB:.2f} GiB"
        )
    lines.append(f"{_CORE} init engine (profile, create kv cache, warmup model) took 0.00 s")
    return lines


def serving_lines(url: str) -> list[str]:
    """The lines of the API server once it listens on `url`."""
    return [
        f"{_API} Starting vLLM server on {url}",
        "INFO:     Application startup complete.",
    ]


def _gib(value_bytes: float) -> str:
    """GiB as vLLM 0.32's `format_gib` writes them: rounded to two places, shortest form."""
    return f"{round(value_bytes / GIB, 2)}"
