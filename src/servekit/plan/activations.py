"""Peak activation memory of vLLM's profiling run, per GPU (core).

vLLM measures the torch allocator's peak while it runs, in order: the multimodal
encoder on its largest dummy input (multimodal models, unless skipped), one forward
pass over max_num_batched_tokens tokens, and the sampler on its largest batch of logits.
These run one after another, so the peak is the largest of the three live sets.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.plan.inputs import PlanInputs
from servekit.plan.weights import kv_heads_per_rank
from servekit.units import dtype_bytes

# Bytes live per logit while sampling with top-k/top-p: float32 logits (4), sorted
# values (4), int64 sort indices (8) and float32 probabilities (4).
SAMPLER_BYTES_PER_LOGIT = 20
# Bytes per float32 router logit.
ROUTER_LOGIT_BYTES = 4
# Items per prompt vLLM V1 allows a modality limit_mm_per_prompt leaves unset
# (config/multimodal.py get_limit_per_prompt, 0.10.1 to 0.32.0).
MM_LIMIT_PER_PROMPT = 999
# First release checked whose multimodal budget takes floor(budget / T) items, capped by
# max_model_len // T per prompt (0.10.1 v1/worker/utils.py; 0.9.1 took ceil).
MM_FLOOR_ITEMS_FROM = (0, 10, 0)
# Releases whose HF Pixtral encoder builds a dense block mask (xformers, which avoids it,
# stopped being installed with vLLM in 0.12.0; 0.30.0 runs it on an attention backend
# without a mask): pixtral.py PixtralHFVisionModel.forward, 0.12.0 to 0.28.0.
MM_DENSE_MASK_RELEASES = ((0, 12, 0), (0, 30, 0))


@dataclass(frozen=True, slots=True)
class ActivationPeak:
    """The three profiled live sets and their maximum, in bytes per GPU."""

    forward_bytes: float
    sampler_bytes: float
    mm_encoder_bytes: float

    @property
    def peak_bytes(self) -> float:
        """The profiled peak: the largest live set."""
        return max(self.forward_bytes, self.sampler_bytes, self.mm_encoder_bytes)


def forward_live_bytes(inputs: PlanInputs, num_tokens: int) -> float:
    """Largest live set of one transformer layer's forward pass over num_tokens tokens.

    Two hidden-size buffers (residual and normed input) stay live; on top of them the
    larger of the attention projections and the MLP (dense or fused-MoE) intermediates.
    """
    m = inputs.model
    tp = inputs.tensor_parallel_size
    a = dtype_bytes(m.dtype)
    t = num_tokens
    h = m.hidden_size
    heads = m.num_attention_heads / tp
    if m.mla is not None:
        qk = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim
        attention = t * (heads * qk + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * a
        attention += t * heads * (m.mla.qk_nope_head_dim + m.mla.v_head_dim) * a
        attention += t * heads * m.mla.v_head_dim * a
    else:
        kv = kv_heads_per_rank(m.num_kv_heads, tp)
        attention = t * (heads + 2 * kv) * m.head_dim * a + t * heads * m.head_dim * a
    dense = t * 3 * m.intermediate_size / tp * a  # gate+up output and activation output
    mlp = dense
    if m.moe is not None:
        moe = m.moe
        inter = moe.expert_intermediate_size / tp
        routed = t * moe.top_k * (3 * inter + h) * a  # w13 out, activation, w2 out per expert
        mlp = max(dense, routed + t * moe.num_experts * ROUTER_LOGIT_BYTES)
    return 2 * t * h * a + max(attention, mlp)


def mm_dummy_items(inputs: PlanInputs) -> int:
    """Items in the dummy batch vLLM's profiling run feeds the encoder.

    vLLM V1 (multimodal/encoder_budget.py MultiModalBudget, v1/worker/utils.py before
    0.19): the encoder budget is max(max_num_batched_tokens, T) for T the largest item's
    tokens (encoder_cache_manager.py compute_mm_encoder_budget); it holds budget // T
    items, at most max_num_seqs x max(1, min(limit_mm_per_prompt, max_model_len // T)),
    and at least one. Up to 0.9 it was ceil(budget / T), at most max_num_seqs x the limit
    (gpu_model_runner.py profile_run). An item that fills max_model_len is one item.
    """
    v = inputs.model.vision
    if v is None or v.max_tokens_per_item is None:
        return 1
    t = v.max_tokens_per_item
    budget = max(inputs.max_num_batched_tokens, t)
    if inputs.accounting.release < MM_FLOOR_ITEMS_FROM:
        return min(-(-budget // t), inputs.max_num_seqs * MM_LIMIT_PER_PROMPT)
    per_prompt = max(1, min(MM_LIMIT_PER_PROMPT, inputs.max_model_len // t))
    return max(1, min(budget // t, inputs.max_num_seqs * per_prompt))


def mm_dummy_tokens(inputs: PlanInputs) -> int:
    """Tokens of the profiling run's dummy batch, items x T (max_model_len for an item that
    fills the context): the most encoder outputs profile_run keeps in its encoder cache
    through the forward pass and sampler (gpu_model_runner.py, `encoder_cache["tmp_i"]`)."""
    v = inputs.model.vision
    if v is None:
        return 0
    return mm_dummy_items(inputs) * (v.max_tokens_per_item or inputs.max_model_len)


def mm_encoder_patches(inputs: PlanInputs) -> int:
    """Encoder input patches of the profiling run's dummy batch: items x patches per item.

    An item without a stated size fills max_model_len tokens (MiniMax-M3's video, capped
    to fit the context), max_model_len x patches_per_token patches.
    """
    v = inputs.model.vision
    if v is None:
        return 0
    if v.max_tokens_per_item is None:
        return inputs.max_model_len * v.patches_per_token
    per_item = v.patches_per_item or v.max_tokens_per_item * v.patches_per_token
    return mm_dummy_items(inputs) * per_item


def mm_encoder_live_bytes(inputs: PlanInputs) -> float:
    """Live set of the vision encoder on the profiling run's dummy batch.

    The pixel input stays live throughout, and so does a dense patches x patches
    attention mask where the encoder builds one (Pixtral HF, in the releases that do).
    On top of them, the larger of one ViT layer (residual, normed input and MLP-down
    output at full width; MLP-up and activation outputs split by the encoder's TP) and
    the per-patch projector (its input, the split up-projection and activation, and the
    full-width all-reduced output).
    """
    m = inputs.model
    v = m.vision
    if v is None:
        return 0.0
    a = dtype_bytes(m.dtype)
    patches = mm_encoder_patches(inputs)
    share = inputs.tensor_parallel_size if inputs.mm_encoder_tp else 1
    w = v.hidden_size
    layer = 3 * w + 2 * v.intermediate_size / share
    projector = 0.0
    if v.projector_width:
        p = v.projector_width
        projector = w + 2 * p / share + p
    first, end = MM_DENSE_MASK_RELEASES
    mask = (
        patches * patches if v.dense_block_mask and first <= inputs.accounting.release < end else 0
    )
    return (patches * (v.values_per_patch + max(layer, projector)) + mask) * a


def activation_peak(inputs: PlanInputs) -> ActivationPeak:
    """Return the live sets vLLM's profiling run measures, per GPU."""
    m = inputs.model
    a = dtype_bytes(m.dtype)
    forward = forward_live_bytes(inputs, inputs.max_num_batched_tokens)

    rows = min(inputs.max_num_batched_tokens, inputs.max_num_seqs)
    if inputs.draft is not None:
        rows *= 2  # the rejection sampler's dummy run: one draft token per request
    sampler: float = rows * m.vocab_size * SAMPLER_BYTES_PER_LOGIT
    sampler += inputs.max_num_batched_tokens * m.hidden_size * a  # hidden states still live

    encoder = 0.0
    if inputs.mm_profiling and m.vision is not None:
        encoder = mm_encoder_live_bytes(inputs)
    return ActivationPeak(forward_bytes=forward, sampler_bytes=sampler, mm_encoder_bytes=encoder)
