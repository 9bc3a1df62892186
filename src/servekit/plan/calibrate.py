"""Measured overheads from a real startup log, and their use in a plan (core).

`measured_calibration` reads what a vLLM startup log shows of the memory the planner
models but vLLM prints no line for: activation peak + non-torch memory is requested -
weights - available KV cache (- the CUDA-graph estimate when VLLM_MEMORY_PROFILER_ESTIMATE_
CUDAGRAPHS puts it in the budget), and the CUDA-graph memory. It measures with the plan's
accounting, so it refuses a log of another vLLM version or gpu_memory_utilization.
`calibrated_non_torch` gives the plan's non-torch term that makes its activation peak +
non-torch equal the measured figure for the profile's GPU and engine version, and
`calibrated_graphs` the measured CUDA-graph memory that replaces the modelled one.
"""

from __future__ import annotations

from pydantic import ValidationError

from servekit.errors import ConfigError, StartupLogError
from servekit.plan.activations import activation_peak
from servekit.plan.engine_rules import release_or_zero
from servekit.plan.fit import MemoryPlan, make_plan
from servekit.plan.inputs import PlanInputs
from servekit.plan.reconcile import log_mismatches
from servekit.plan.startup_log import StartupFigures
from servekit.profiles.schema import Calibration, Profile
from servekit.units import GIB, to_gib


def measured_calibration(
    plan: MemoryPlan, figures: StartupFigures, *, engine_version: str, source: str
) -> Calibration:
    """The calibration entry a log measures for the plan's GPU.

    Raises:
        ConfigError: the log ran another vLLM version or gpu_memory_utilization than the
            plan (its figures would be measured with the wrong accounting).
        StartupLogError: the log lacks the weights or available-KV line, or they leave a
            negative overhead (a log of another configuration).
    """
    mismatches = log_mismatches(plan, figures)
    if mismatches:
        version = figures.vllm_version or plan.inputs.engine_version
        gmu = figures.gpu_memory_utilization or plan.inputs.gpu_memory_utilization
        raise ConfigError(
            f"cannot calibrate: {'; '.join(mismatches)}",
            fix=f"plan with --set engine.version={version} --set gpu_memory_utilization={gmu} "
            "to match the log, or calibrate from a log of this configuration",
        )
    if figures.weights_gib is None or figures.available_kv_gib is None:
        raise StartupLogError(
            "the log has no 'Model loading took' or 'Available KV cache memory' line to "
            "measure overheads from",
            fix="pass the full startup log of a vLLM V1 engine that reached KV cache sizing",
        )
    total = figures.total_memory_gib or to_gib(plan.capacity_bytes)
    requested = total * plan.inputs.gpu_memory_utilization
    graphs = _measured_graphs(plan, figures)
    in_budget = graphs if plan.inputs.estimate_cudagraphs else None
    overhead = requested - figures.weights_gib - figures.available_kv_gib - (in_budget or 0)
    if overhead < 0:
        raise StartupLogError(
            f"the log's weights {figures.weights_gib} GiB + KV {figures.available_kv_gib} GiB "
            f"exceed {requested:.2f} GiB requested on {plan.inputs.gpu.name}",
            fix="calibrate from a log of this profile's GPU and gpu_memory_utilization",
        )
    return Calibration(
        gpu=plan.inputs.gpu.name,
        engine_version=engine_version,
        non_kv_overhead_gib=round(overhead, 3),
        cuda_graph_gib=graphs,
        source=source,
    )


def _measured_graphs(plan: MemoryPlan, figures: StartupFigures) -> float | None:
    """The log's CUDA-graph memory: with the estimate in the budget, the estimate vLLM
    subtracted (so the calibrated plan reproduces the logged KV); else what capture took."""
    first, second = figures.graph_capture_gib, figures.estimated_cuda_graph_gib
    if plan.inputs.estimate_cudagraphs:
        first, second = second, first
    return first if first is not None else second


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


def calibrated_graphs(entry: Calibration | None, inputs: PlanInputs) -> float | None:
    """The measured CUDA-graph bytes that replace the modelled graphs (none when eager)."""
    if entry is None or entry.cuda_graph_gib is None or inputs.enforce_eager:
        return None
    return entry.cuda_graph_gib * GIB


def calibrated_plan(
    profile: Profile, inputs: PlanInputs, non_torch_bytes: float
) -> tuple[MemoryPlan, Calibration | None]:
    """The plan with the profile's measured overheads and CUDA graphs for this GPU and
    version when it has them (else `non_torch_bytes` and the modelled graphs), and the entry."""
    entry = calibration_for(profile, inputs.gpu.name)
    if entry is None:
        return make_plan(inputs, non_torch_bytes=non_torch_bytes), None
    non_torch = calibrated_non_torch(entry, inputs)
    graphs = calibrated_graphs(entry, inputs)
    return make_plan(inputs, non_torch_bytes=non_torch, graph_bytes=graphs), entry


def replace_calibration(entries: list[Calibration], new: Calibration) -> list[dict[str, object]]:
    """The calibration list with `new` in place of any entry for its GPU and version."""
    version = release_or_zero(new.engine_version)
    kept = [
        e for e in entries
        if not (e.gpu == new.gpu and release_or_zero(e.engine_version) == version)
    ]  # fmt: skip
    return [e.model_dump(mode="json", exclude_none=True) for e in [*kept, new]]


def calibration_document(
    own: list[object], new: Calibration, merged: Profile
) -> list[dict[str, object]]:
    """A profile file's own calibration list (`own`, as its YAML holds it: not the entries
    `extends:` brings) with `new` in place, validated with the rest of the `merged` profile
    before anything is written.

    Raises:
        ConfigError: the calibrated profile would not validate.
    """
    try:
        document = replace_calibration([Calibration.model_validate(e) for e in own], new)
        Profile.model_validate(
            {**merged.model_dump(mode="json", by_alias=True), "calibration": document}
        )
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(map(str, problem["loc"]))
        raise ConfigError(
            f"{merged.name}: the calibrated profile would not validate ({where}: {problem['msg']})",
            fix="fix the file's calibration entries, then calibrate again",
        ) from None
    return document
