"""Peak activation memory of vLLM's profiling run, per GPU (core).

vLLM measures the torch allocator's peak while it runs, in order: the multimodal
encoder on its largest dummy input (multimodal models, unless skipped), one forward
pass over max_num_batched_tokens tokens, and the sampler on its largest batch of logits.
These run one after another, so the peak is the largest of the three live sets, each
with what earlier phases leave allocated (the forward's hidden states, persistent
workspaces, the encoder's outputs) and the cuBLAS workspace the first matmul allocates.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.hardware import load_catalog
from servekit.plan.engine_rules import SamplerKernel
from servekit.plan.inputs import PlanInputs
from servekit.plan.weights import kv_heads_per_rank
from servekit.specs import GpuSpec
from servekit.units import MIB, dtype_bytes

# Bytes per float32 router logit.
ROUTER_LOGIT_BYTES = 4
# Items per prompt vLLM V1 allows a modality limit_mm_per_prompt leaves unset
# (config/multimodal.py get_limit_per_prompt, 0.10.1 to 0.32.0).
MM_LIMIT_PER_PROMPT = 999
# From this release the multimodal budget takes floor(budget / T) items, capped by
# max_model_len // T per prompt: read in 0.10.1 (v1/worker/utils.py), while 0.9.1 took ceil;
# 0.10.0 was not read and is taken to behave as 0.10.1.
MM_FLOOR_ITEMS_FROM = (0, 10, 0)
# Releases whose HF Pixtral encoder builds a dense block mask (xformers, which avoids it,
# stopped being installed with vLLM in 0.12.0; 0.30.0 runs it on an attention backend
# without a mask): pixtral.py PixtralHFVisionModel.forward, 0.12.0 to 0.28.0.
MM_DENSE_MASK_RELEASES = ((0, 12, 0), (0, 30, 0))
# Bytes per float32 value.
FP32 = 4
# The V0 engine's sampler (model_executor/layers/sampler.py) is not re-derived: float32
# logits (4), sorted values (4), int64 sort indices (8) and float32 probabilities (4).
V0_SAMPLER_BYTES_PER_LOGIT = 20
# apply_top_k_top_p uses the Triton kernel from this many rows on (v0.17.0+
# v1/sample/ops/topk_topp_sampler.py: `logits.shape[0] >= 8`), PyTorch sort below.
TRITON_MIN_ROWS = 8
# PyTorch's default cuBLAS workspace per handle and stream, allocated through the caching
# allocator on the first matmul (aten/src/ATen/cuda/CublasHandlePool.cpp
# parseChosenWorkspaceSize: 4096 x 8 KiB on compute capability 9.0, else
# 4096 KiB x 2 + 16 KiB x 8).
CUBLAS_WORKSPACE_SM90 = 32 * MIB
CUBLAS_WORKSPACE_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8


@dataclass(frozen=True, slots=True)
class LogitTensor:
    """One tensor of the dummy sampler's live set, in bytes per logit (row x vocab)."""

    name: str
    bytes_per_logit: int
    source: str


def sm_count(gpu: GpuSpec) -> int:
    """Streaming multiprocessors of `gpu`, the rows of vLLM's cached Triton top-k/top-p buffer.

    The GPU catalog's `sm_count`; for a GPU without one, the largest count in the catalog,
    so the buffer is not under-counted.
    """
    if gpu.sm_count is not None:
        return gpu.sm_count
    return max(spec.sm_count for spec in load_catalog().values() if spec.sm_count is not None)


_RUNNER = "v1/worker/gpu_model_runner.py _dummy_sampler_run"
_SAMPLER = "v1/sample/sampler.py Sampler.forward"
_TOPK = "v1/sample/ops/topk_topp_sampler.py"


def _common(logits_bytes: int) -> tuple[LogitTensor, ...]:
    """The logits every V1 kernel keeps: the model-dtype output and its float32 copy."""
    tensors = [
        LogitTensor(
            "model-dtype logits",
            logits_bytes,
            f"{_RUNNER}: logits = self.model.compute_logits(...) stays referenced while "
            "self.sampler(...) runs (LogitsProcessor: lm_head output, gathered to the full "
            "vocabulary under TP)",
        )
    ]
    if logits_bytes != FP32:  # .to(torch.float32) on a float32 tensor returns it unchanged
        tensors.append(
            LogitTensor(
                "float32 logits",
                FP32,
                f"{_SAMPLER}: logits = logits.to(torch.float32); apply_temperature divides "
                "in place",
            )
        )
    return tuple(tensors)


def _sort(*, copying_scatter: bool) -> tuple[LogitTensor, ...]:
    """PyTorch sort top-k/top-p: what is live when the re-sorted logits are written."""
    where = f"{_TOPK} apply_top_k_top_p" + ("" if copying_scatter else "_pytorch")
    tensors = [
        LogitTensor("sorted values", FP32, f"{where}: logits.sort(dim=-1) values (float32)"),
        LogitTensor("sort indices", 8, f"{where}: logits.sort(dim=-1) indices (int64)"),
        LogitTensor("top-k mask", 1, f"{where}: top_k_mask = logits_sort < ... (bool, kept)"),
        LogitTensor(
            "sorted probabilities",
            FP32,
            f"{where}: probs_sort = logits_sort.softmax(dim=-1); cumsum(out=probs_sort)",
        ),
        LogitTensor("top-p mask", 1, f"{where}: top_p_mask = probs_sum <= 1 - p (bool)"),
    ]
    if copying_scatter:
        tensors.append(
            LogitTensor(
                "re-sorted logits",
                FP32,
                f"{where}: logits_sort.scatter(...) allocates a new tensor (v0.12.0-v0.16.0; "
                "scatter_ into the logits in place from v0.17.0)",
            )
        )
    return tuple(tensors)


def sampler_tensors(
    kernel: SamplerKernel, *, logits_bytes: int = 2, rows: int = 1024
) -> tuple[LogitTensor, ...]:
    """The dummy sampler's live set at its peak, per logit, for one V1 kernel.

    vLLM's dummy run samples at random (temperature 0.5, top_k = vocab - 1, top_p = 0.9,
    no logprobs: `_dummy_sampler_run`, v0.8.5 to v0.32.0), so top-k and top-p both run.
    """
    common = _common(logits_bytes)
    probs = LogitTensor(
        "probabilities",
        FP32,
        f"{_TOPK} forward_native: probs = logits.softmax(dim=-1, dtype=torch.float32)",
    )
    noise = LogitTensor(
        "exponential noise",
        FP32,
        f"{_TOPK} random_sample: q = torch.empty_like(probs).exponential_(); probs.div_(q)",
    )
    if kernel == "sort":
        return common + _sort(copying_scatter=True)
    if kernel == "triton":
        if rows < TRITON_MIN_ROWS:
            return common + _sort(copying_scatter=False)
        # apply_top_k_top_p_triton masks the float32 logits in place
        return (*common, probs, noise)
    if kernel == "flashinfer":
        masked = LogitTensor(
            "top-k masked logits",
            FP32,
            "flashinfer sampling.py top_k_top_p_sampling_from_logits (top_k_first): "
            "masked_logits = top_k_mask_logits(logits, top_k)",
        )
        fi_probs = LogitTensor(
            "probabilities",
            FP32,
            "flashinfer sampling.py top_k_top_p_sampling_from_logits: "
            "probs = torch.softmax(masked_logits) for top_p_sampling_from_probs",
        )
        return (*common, masked, fi_probs)
    # flashinfer_probs (v0.8.x): forward_cuda softmaxes, FlashInfer samples from the probs
    return (*common, probs)


def sampler_bytes_per_logit(
    kernel: SamplerKernel, *, logits_bytes: int = 2, rows: int = 1024
) -> int:
    """Bytes live per logit while the dummy sampler runs `kernel`."""
    tensors = sampler_tensors(kernel, logits_bytes=logits_bytes, rows=rows)
    return sum(t.bytes_per_logit for t in tensors)


def triton_buffer_bytes(inputs: PlanInputs, rows: int) -> float:
    """vLLM's cached Triton top-k/top-p scratch buffer: one float32 vocab row per program.

    v0.17.0+ v1/sample/ops/topk_topp_triton.py apply_top_k_top_p_triton: NUM_PROGRAMS =
    min(num_sm, batch), buffer = logits.new_empty((min(next_power_of_2(NUM_PROGRAMS),
    num_sm), vocab)), kept in _TRITON_BUFFER_CACHE.
    """
    if inputs.accounting.sampler_kernel != "triton" or rows < TRITON_MIN_ROWS:
        return 0.0
    sms = sm_count(inputs.gpu)
    programs = min(sms, rows)
    buffer_rows = min(1 << (programs - 1).bit_length(), sms)
    return float(buffer_rows * inputs.model.vocab_size * FP32)


def cublas_workspace_bytes(gpu: GpuSpec) -> float:
    """PyTorch's default cuBLAS workspace for one handle and stream on `gpu`."""
    return float(CUBLAS_WORKSPACE_SM90 if gpu.sm == 90 else CUBLAS_WORKSPACE_OTHER)


def moe_workspace_bytes(inputs: PlanInputs) -> float:
    """vLLM's persistent fused-MoE workspace for unquantized experts (TritonExperts).

    v0.19.0 fused_moe/fused_moe.py TritonExperts.workspace_shapes: workspace13 =
    (M, top_k, max(N/2, K)), workspace2 = (M, top_k, max(N, K)), output (M, K), with N the
    w13 width (2 x intermediate per rank) and K the hidden size; modular_kernel.py
    _allocate_buffers takes max(workspace13, output) and workspace2 at once from
    current_workspace_manager(), which keeps the largest size asked for. M is
    max_num_batched_tokens (no chunking from v0.18.0; v0.14-v0.17 chunk at 16,384 tokens).
    """
    m = inputs.model
    moe = m.moe
    if moe is None or not inputs.accounting.moe_workspace_persists:
        return 0.0
    if m.quantization not in ("bf16", "fp16"):
        return 0.0  # quantized experts run other kernels with their own workspaces
    a = dtype_bytes(m.dtype)
    t = inputs.max_num_batched_tokens
    h = m.hidden_size
    split = 1 if inputs.enable_expert_parallel else inputs.tensor_parallel_size
    inter = moe.expert_intermediate_size / split
    common = max(t * moe.top_k * max(inter, h), t * h)
    return float((common + t * moe.top_k * max(2 * inter, h)) * a)


def pp_buffer_bytes(inputs: PlanInputs) -> float:
    """Intermediate-tensor buffers a non-first pipeline stage allocates in its first dummy run.

    v0.8.5-v0.32.0 v1/worker/gpu_model_runner.py _dummy_run: make_empty_intermediate_tensors
    (hidden states and residual, max_num_tokens rows each) when not the first PP rank; the
    last rank, which also runs the sampler, has the largest peak.
    """
    if inputs.pipeline_parallel_size <= 1:
        return 0.0
    m = inputs.model
    return float(2 * inputs.max_num_batched_tokens * m.hidden_size * dtype_bytes(m.dtype))


def encoder_cache_bytes(inputs: PlanInputs) -> float:
    """Encoder outputs profile_run keeps in encoder_cache through the forward and sampler.

    v0.19.0 gpu_model_runner.py profile_run: `self.encoder_cache[f"tmp_{i}"] = output`,
    cleared after the sampler: the dummy batch's items x tokens per item
    (`mm_dummy_tokens`), at the text width.
    """
    m = inputs.model
    if not (inputs.mm_profiling and m.vision is not None):
        return 0.0
    return float(mm_dummy_tokens(inputs) * m.hidden_size * dtype_bytes(m.dtype))


@dataclass(frozen=True, slots=True)
class ActivationPeak:
    """The three profiled live sets and their maximum, in bytes per GPU.

    forward_bytes and sampler_bytes include what earlier phases leave allocated, the
    encoder's cached outputs (encoder_cache_bytes) among them; workspace_bytes (the cuBLAS
    workspace) is live in every phase and counted once.
    """

    forward_bytes: float
    sampler_bytes: float
    mm_encoder_bytes: float
    workspace_bytes: float = 0.0
    encoder_cache_bytes: float = 0.0

    @property
    def text_only_bytes(self) -> float:
        """The forward and sampler peak without multimodal profiling (no encoder outputs)."""
        return max(self.forward_bytes, self.sampler_bytes) - self.encoder_cache_bytes

    @property
    def peak_bytes(self) -> float:
        """The profiled peak: the largest live set, plus the workspace live in all of them."""
        phases = max(self.forward_bytes, self.sampler_bytes, self.mm_encoder_bytes)
        return phases + self.workspace_bytes


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
    t = inputs.max_num_batched_tokens
    rows = min(t, inputs.max_num_seqs)
    if inputs.draft is not None:
        rows *= 2  # the rejection sampler's dummy run: one draft token per request
    encoder = 0.0
    if inputs.mm_profiling and m.vision is not None:
        encoder = mm_encoder_live_bytes(inputs)

    if inputs.accounting.engine == "v0":
        sampler = rows * m.vocab_size * V0_SAMPLER_BYTES_PER_LOGIT + t * m.hidden_size * a
        return ActivationPeak(
            forward_bytes=forward_live_bytes(inputs, t),
            sampler_bytes=sampler,
            mm_encoder_bytes=encoder,
        )

    # what the forward pass runs on top of: the encoder's outputs, a later stage's buffers
    cache = encoder_cache_bytes(inputs)
    carried = cache + pp_buffer_bytes(inputs)
    forward = forward_live_bytes(inputs, t) + carried
    per_logit = sampler_bytes_per_logit(
        inputs.accounting.sampler_kernel, logits_bytes=int(a), rows=rows
    )
    sampler = rows * m.vocab_size * per_logit + triton_buffer_bytes(inputs, rows)
    # profile_run holds the forward's hidden states and their last-token rows;
    # _dummy_sampler_run samples from torch.rand_like of those rows
    sampler += (t + 2 * rows) * m.hidden_size * a
    sampler += carried + moe_workspace_bytes(inputs)
    return ActivationPeak(
        forward_bytes=forward,
        sampler_bytes=sampler,
        mm_encoder_bytes=encoder,
        workspace_bytes=cublas_workspace_bytes(inputs.gpu),
        encoder_cache_bytes=cache,
    )
