"""GPU memory planning (core): weights, KV cache, activations, CUDA graphs, fit."""

from servekit.plan.fit import MemoryPlan, make_plan, misfit_message, plan_to_json
from servekit.plan.inputs import PlanInputs, plan_inputs

__all__ = ["MemoryPlan", "PlanInputs", "make_plan", "misfit_message", "plan_inputs", "plan_to_json"]
