"""Which candidates can run (core): vLLM's scheduler rules, then servekit's memory planner.

A candidate is infeasible, with the reason, when vLLM would refuse its settings at startup
(SchedulerConfig in vLLM 0.32: max_num_batched_tokens below max_num_seqs; with chunked
prefill off, below max_model_len) or would not run them (a per-batch-size speculation
schedule with data parallelism falls back to one k), when the profile schema refuses the
combination, when the planner says it does not fit (the weights alone exceed the memory
gpu_memory_utilization allows, or the KV cache cannot hold one max_model_len request), or
when its CUDA graphs, captured outside the KV budget, exceed the memory left plus the
activation headroom. A feasible candidate inside the OOM risk the planner warns about
(graphs outside the budget, larger than the memory it leaves free) is marked with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.errors import ServekitError
from servekit.hardware import lookup_gpu
from servekit.plan import MemoryPlan, make_plan, misfit_message, plan_inputs
from servekit.plan.fit import capture_risks
from servekit.profiles.schema import Profile
from servekit.tune.space import Settings, variant
from servekit.units import to_gib


@dataclass(frozen=True, slots=True)
class Feasibility:
    """A candidate's plan, or why it cannot run.

    Attributes:
        profile: the candidate as a profile (None when the schema refused it).
        reason: why it cannot run (None: it can).
        oom_risk: the planner's OOM-risk warning it is inside of, if any.
        kv_cache_tokens: KV cache tokens per replica.
        max_concurrency: requests of max_model_len the KV cache holds (vLLM's figure).
        num_gpu_blocks: KV blocks per replica, for the simulator.
    """

    profile: Profile | None
    reason: str | None
    oom_risk: str | None = None
    kv_cache_tokens: int = 0
    max_concurrency: float = 0.0
    num_gpu_blocks: int = 0

    @property
    def feasible(self) -> bool:
        """True when the candidate can run."""
        return self.reason is None


def scheduler_problem(settings: Settings) -> str | None:
    """What vLLM's scheduler config refuses in these settings, or None."""
    if settings.max_num_batched_tokens < settings.max_num_seqs:
        return (
            f"max_num_batched_tokens {settings.max_num_batched_tokens} is below max_num_seqs "
            f"{settings.max_num_seqs}; vLLM refuses to start"
        )
    if settings.enable_chunked_prefill is False and (
        settings.max_num_batched_tokens < settings.max_model_len
    ):
        return (
            "with chunked prefill off, max_num_batched_tokens "
            f"{settings.max_num_batched_tokens} must hold a whole max_model_len "
            f"{settings.max_model_len} prompt; vLLM refuses to start"
        )
    if settings.speculation.schedule is not None and settings.data_parallel_size > 1:
        return (
            "vLLM turns num_speculative_tokens_per_batch_size off with data parallelism "
            f"(data_parallel_size {settings.data_parallel_size}): its ranks could pick "
            "different k and deadlock; it would run k at every batch size"
        )
    return None


def assess(profile: Profile, settings: Settings) -> Feasibility:
    """Plan one candidate (never raises: a refusal is the reason)."""
    problem = scheduler_problem(settings)
    if problem is not None:
        return Feasibility(None, problem)
    try:
        candidate = variant(profile, settings)
        plan = make_plan(plan_inputs(candidate, lookup_gpu(candidate.hardware.gpu)))
    except ServekitError as exc:
        return Feasibility(None, exc.message)
    return judge_plan(candidate, plan)


def judge_plan(candidate: Profile, plan: MemoryPlan) -> Feasibility:
    """A planned candidate's feasibility."""
    risk, failure = capture_risks(plan)
    weights = plan.weights.total_bytes
    if weights >= plan.requested_bytes:
        tp = plan.inputs.tensor_parallel_size
        return Feasibility(
            candidate,
            f"the weights take {to_gib(weights):.1f} GiB per GPU at tensor parallel {tp}, "
            f"more than the {to_gib(plan.requested_bytes):.1f} GiB gpu_memory_utilization "
            f"{plan.inputs.gpu_memory_utilization} allows",
        )
    if not plan.fits:
        return Feasibility(candidate, misfit_message(plan))
    if failure is not None:
        return Feasibility(candidate, failure)
    block_size = plan.inputs.block_size
    return Feasibility(
        candidate,
        None,
        oom_risk=risk,
        kv_cache_tokens=plan.kv_cache_tokens,
        max_concurrency=plan.max_concurrency,
        num_gpu_blocks=max(plan.kv_cache_tokens // block_size, 0),
    )
