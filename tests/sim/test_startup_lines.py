"""The simulator's startup log parses back to the planner's figures (sim/startup_lines.py)."""

from __future__ import annotations

import asyncio

import pytest

from servekit.doctor.log_analysis import analyze_log
from servekit.errors import SimulationError
from servekit.hardware import lookup_gpu
from servekit.plan import MemoryPlan, make_plan, plan_inputs
from servekit.profiles import Profile, load_profile
from servekit.runtime.stages import StageTracker
from servekit.sim.faults import Faults
from servekit.sim.server import serve_async
from servekit.sim.startup_lines import loaded_lines, loading_lines, serving_lines, startup_facts
from servekit.units import GIB

M3 = "minimax-m3-mxfp8-8xa800"
TINY_CPU = "benchmarks/profiles/tiny-llama-cpu.yaml"


def _lines(profile: Profile) -> tuple[list[str], MemoryPlan]:
    gpu = lookup_gpu(profile.hardware.gpu)
    plan = make_plan(plan_inputs(profile, gpu))
    facts = startup_facts(profile, plan, device_name=gpu.device_name)
    lines = [*loading_lines(facts), *loaded_lines(facts, load_s=1.5),
             *serving_lines("http://127.0.0.1:8000")]  # fmt: skip
    return lines, plan


@pytest.mark.parametrize("name", [M3, TINY_CPU])
def test_the_startup_log_reads_back_as_the_plan(name: str) -> None:
    """analyze_log finds the plan's weights, KV memory, capacity and concurrency."""
    profile = load_profile(name)
    lines, plan = _lines(profile)
    figures = analyze_log("\n".join(lines)).figures
    assert figures.vllm_version == profile.engine.version
    assert figures.model == profile.model.path
    assert figures.weights_gib == round(plan.weights.total_bytes / GIB, 2)
    assert figures.available_kv_gib == round(plan.kv_cache_bytes / GIB, 2)
    assert figures.kv_cache_tokens == plan.kv_cache_tokens
    assert figures.max_concurrency == pytest.approx(plan.max_concurrency, abs=0.005)
    assert figures.concurrency_tokens_per_request == profile.serve_args.max_model_len
    assert figures.failures == ()


def test_a_gpu_start_goes_through_every_stage_and_a_cpu_start_skips_graphs() -> None:
    """The stage tracker sees weights, profiling, KV cache, graphs (GPU only) and ready."""
    for name, expected in (
        (M3, ["weights", "profiling", "kv_cache", "graphs", "ready"]),
        (TINY_CPU, ["weights", "profiling", "kv_cache", "ready"]),
    ):
        tracker = StageTracker()
        lines, _ = _lines(load_profile(name))
        assert [stage for line in lines for stage in tracker.feed(line)] == expected
    cpu_lines, _ = _lines(load_profile(TINY_CPU))
    assert any(" CPU KV cache size: " in line for line in cpu_lines)
    assert not any("CUDA graph" in line or "Graph capturing" in line for line in cpu_lines)


def test_sim_serve_logs_the_start_before_it_announces_the_url() -> None:
    """serve_async logs the whole start, ending with the API server's URL, then announces."""
    profile = load_profile(TINY_CPU)
    said: list[str] = []

    async def run() -> None:
        stop = asyncio.Event()

        def announce(line: str) -> None:
            said.append(line)
            stop.set()

        await serve_async(profile, stop=stop, port=0, announce=announce, log=said.append)

    asyncio.run(run())
    assert said[-1].startswith("servekit sim: serving tiny-llama-cpu on http://127.0.0.1:")
    url = said[-1].rpartition(" on ")[2]
    assert said[-3] == f"(APIServer pid=1) INFO Starting vLLM server on {url}"
    figures = analyze_log("\n".join(said)).figures
    assert figures.kv_cache_tokens is not None
    assert said.index(next(x for x in said if "Starting to load model" in x)) < said.index(
        next(x for x in said if "KV cache size" in x)
    )


def test_an_oom_start_logs_loading_then_the_oom() -> None:
    """oom-at-startup: the log starts loading the model, then shows CUDA out of memory."""
    profile = load_profile(M3)
    said: list[str] = []

    async def run() -> None:
        await serve_async(profile, stop=asyncio.Event(), port=0, faults=Faults(oom_at_startup=True),
                          announce=said.append, log=said.append)  # fmt: skip

    with pytest.raises(SimulationError, match="ran out of GPU memory"):
        asyncio.run(run())
    analysis = analyze_log("\n".join(said))
    assert analysis.failed
    assert any("Starting to load model" in line for line in said)
