"""Measured overheads from a real startup log, and their use in a plan (core).

`measured_calibration` reads what a vLLM startup log shows of the memory the planner
models but vLLM prints no line for: activation peak + non-torch memory is requested -
weights - available KV cache (- the CUDA-graph estimate when VLLM_MEMORY_PROFILER_ESTIMATE_
CUDAGRAPHS puts it in the budget). `calibrated_non_torch` gives the plan's non-torch term
that makes its activation peak + non-torch equal the measured figure for the profile's GPU
and engine version.
"""

from __future__ import annotations

from servekit.errors import StartupLogError
from servekit.plan.activations import activation_peak
from servekit.plan.engine_rules import release_or_zero
from servekit.plan.fit import MemoryPlan
from servekit.plan.inputs import PlanInputs
from servekit.plan.startup_log import StartupFigures
from servekit.profiles.schema import Calibration, Profile
from servekit.units import GIB, to_gib


def measured_calibration(
    plan: MemoryPlan, figures: StartupFigures, *, engine_version: str, source: str
) -> Calibration:
    """The calibration entry a log measures for the plan's GPU.

    Raises:
        StartupLogError: the log lacks the weights or available-KV line, or they leave a
            negative overhead (a log of another configuration).
    """
    if figures.weights_gib is None or figures.available_kv_gib is None:
        raise StartupLogError(
            "the log has no 'Model loading took' or 'Available KV cache memory' line to "
            "measure overheads from",
            fix="pass the full startup log of a vLLM V1 engine that reached KV cache sizing",
        )
    utilization = figures.gpu_memory_utilization or plan.inputs.gpu_memory_utilization
    requested = to_gib(plan.capacity_bytes) * utilization
    graphs_in_budget = figures.estimated_cuda_graph_gib if plan.inputs.estimate_cudagraphs else None
    overhead = requested - figures.weights_gib - figures.available_kv_gib - (graphs_in_budget or 0)
    if overhead < 0:
        raise StartupLogError(
            f"the log's weights {figures.weights_gib} GiB + KV {figures.available_kv_gib} GiB "
            f"exceed {requested:.2f} GiB requested on {plan.inputs.gpu.name}",
            fix="calibrate from a log of this profile's GPU and gpu_memory_utilization",
        )
    graphs = figures.graph_capture_gib
    if graphs is None:
        graphs = figures.estimated_cuda_graph_gib
    return Calibration(
        gpu=plan.inputs.gpu.name,
        engine_version=engine_version,
        non_kv_overhead_gib=round(overhead, 3),
        cuda_graph_gib=graphs,
        source=source,
    )


def calibration_for(profile: Profile, gpu_name: str) -> Calibration | None:
    """The profile's measured entry for this GPU and its engine version, if any."""
    version = release_or_zero(profile.engine.version)
    for entry in reversed(profile.calibration):
        if entry.gpu == gpu_name and release_or_zero(entry.engine_version) == version:
            return entry
    return None


def calibrated_non_torch(entry: Calibration, inputs: PlanInputs) -> float:
    """The non-torch bytes that make activation peak + non-torch the measured figure."""
    return entry.non_kv_overhead_gib * GIB - activation_peak(inputs).peak_bytes


def replace_calibration(entries: list[Calibration], new: Calibration) -> list[dict[str, object]]:
    """The calibration list with `new` in place of any entry for its GPU and version."""
    version = release_or_zero(new.engine_version)
    kept = [
        e for e in entries
        if not (e.gpu == new.gpu and release_or_zero(e.engine_version) == version)
    ]  # fmt: skip
    return [e.model_dump(mode="json", exclude_none=True) for e in [*kept, new]]
