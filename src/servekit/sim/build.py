"""Build a simulated engine for a profile (core): plan -> SimModel + parameters -> Engine."""

from __future__ import annotations

import random

from servekit.hardware import lookup_gpu
from servekit.plan import make_plan, plan_inputs
from servekit.profiles.schema import Profile
from servekit.sim.dynamic_sd import dynamic_sd_lookup
from servekit.sim.engine import Engine, EngineLimits
from servekit.sim.model import SimModel, sim_model
from servekit.sim.params import AcceptanceParams, StepTimeParams
from servekit.specs import GpuSpec

# Roofline defaults for a profile without a calibrated `simulator:` section: a fixed step
# cost of a few milliseconds (scheduling, sampling, kernel floors) and typical achieved
# fractions of HBM bandwidth and tensor-core peak for serving workloads.
DEFAULT_STEP = StepTimeParams(
    base_ms=4.0,
    hbm_efficiency=0.6,
    compute_efficiency=0.45,
    decode_request_ms=0.02,
    verify_request_ms=0.05,
    prefill_request_ms=0.1,
    draft_pass_ms=1.0,
    draft_request_ms=0.01,
)
# Drafts that read the target's hidden states; vLLM drops the last block of their prefix
# hits so those states are recomputed (SpeculativeConfig.use_eagle).
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp"})
# EAGLE-family drafts with k=3 at mid-range acceptance (acceptance length ~2.4 at 0.7).
DEFAULT_ACCEPTANCE = AcceptanceParams(points=((0.0, (0.8, 0.65, 0.55)), (1.0, (0.7, 0.5, 0.4))))


def profile_step_params(profile: Profile) -> StepTimeParams:
    """The profile's calibrated step-time coefficients, or the roofline defaults."""
    sim = profile.simulator
    if sim is None:
        return DEFAULT_STEP
    return sim.step


def profile_acceptance(profile: Profile) -> AcceptanceParams:
    """The profile's acceptance probabilities, or the defaults."""
    sim = profile.simulator
    if sim is None or not sim.acceptance:
        return DEFAULT_ACCEPTANCE
    return AcceptanceParams(
        points=tuple((float(t), tuple(probs)) for t, probs in sorted(sim.acceptance.items()))
    )


def profile_sim_model(
    profile: Profile, *, num_gpu_blocks: int | None = None, gpu: GpuSpec | None = None
) -> SimModel:
    """The simulator's facts for a profile, KV pool sized by servekit's planner.

    `gpu`: the hardware as measured, instead of the catalog entry the profile names (a
    CPU host's core, whose bandwidth and matmul rate depend on the machine it is).
    """
    plan = make_plan(plan_inputs(profile, gpu or lookup_gpu(profile.hardware.gpu)))
    return sim_model(plan, num_gpu_blocks=num_gpu_blocks)


def build_engine(
    profile: Profile,
    *,
    seed: int = 0,
    num_gpu_blocks: int | None = None,
    step_params: StepTimeParams | None = None,
    acceptance: AcceptanceParams | None = None,
    gpu: GpuSpec | None = None,
) -> Engine:
    """Return a fresh simulated engine for a profile (`gpu`: as in `profile_sim_model`).

    The engine follows the profile's scheduler settings as vLLM V1 does: dynamic speculative
    decoding from `speculative_config.num_speculative_tokens_per_batch_size` (ignored with
    `data_parallel_size` above 1, and when empty, as vLLM ignores it then), and chunked
    prefill unless `serve_args.enable_chunked_prefill` is false.

    Raises:
        SimulationError: the batch-size schedule is invalid, or chunked prefill is off with
            `max_num_batched_tokens` below `max_model_len` (vLLM refuses to start on both).
    """
    spec = profile.speculative.config if profile.speculative else None
    k = spec.num_speculative_tokens if spec else 0
    args = profile.serve_args
    schedule = spec.num_speculative_tokens_per_batch_size if spec else None
    lookup = None
    # vLLM drops the schedule under data parallelism (ranks would pick different k).
    if schedule and (args.data_parallel_size or 1) == 1:
        lookup = dynamic_sd_lookup(
            schedule, max_num_seqs=args.max_num_seqs, num_speculative_tokens=k
        )
    limits = EngineLimits(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_speculative_tokens=k,
        dynamic_sd_lookup=lookup,
        # vLLM V1 chunks prefills unless told not to (None is its default, on).
        enable_chunked_prefill=args.enable_chunked_prefill is not False,
    )
    return Engine(
        profile_sim_model(profile, num_gpu_blocks=num_gpu_blocks, gpu=gpu),
        limits,
        step_params or profile_step_params(profile),
        (acceptance or profile_acceptance(profile)) if k else None,
        random.Random(seed),
        # vLLM V1 caches prefixes unless told not to (None is its default, on).
        enable_prefix_caching=args.enable_prefix_caching is not False,
        drop_eagle_block=spec is not None and spec.method in EAGLE_METHODS,
    )
