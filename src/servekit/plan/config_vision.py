"""Vision encoder readers (core): a multimodal config's `vision_config` -> VisionSpec facts.

Each reader counts the encoder's and projector's parameters from their layer shapes and the
largest item vLLM's multimodal profiling run feeds the encoder (tokens and patches), with
the vLLM model file each follows in its comments. Keyed by the top-level `model_type`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from servekit.errors import ModelDirError
from servekit.plan.config_keys import FIX, Facts, shown

# Tiles the Llama 4 image processor cuts at most (transformers Llama4ImageProcessorFast
# max_patches, 16 in Llama-4-Scout/Maverick's preprocessor_config.json); vLLM's dummy image
# uses all of them (mllama4.py get_max_num_tiles).
LLAMA4_MAX_TILES = 16
# Frames of Gemma 4's dummy video and soft tokens per frame (vLLM gemma4_mm.py
# _VIDEO_MAX_FRAMES and _VIDEO_MAX_SOFT_TOKENS, 0.19.0 to 0.32.0).
GEMMA4_VIDEO_FRAMES = 32
GEMMA4_FRAME_TOKENS = 70


def vision_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    vision = config.get("vision_config")
    return vision if isinstance(vision, Mapping) else {}


def _vision_int(vision: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = vision.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ModelDirError(
            f"model config has no positive integer vision_config.{key}"
            + (f" (got {shown(value)})" if value is not None else ""),
            fix="add it to config.json or state model.architecture.vision in the profile",
        )
    return value


def _pixtral_vision(config: Mapping[str, Any], text_hidden: int) -> tuple[Facts, str]:
    # vLLM pixtral.py (PixtralHFVisionModel): bias-free patch conv and RMSNorm ln_pre; per
    # layer qkv + o (4w^2), a gated SiLU MLP (3wi) and two RMSNorms. mistral3.py projector:
    # RMSNorm, a patch merger of spatial_merge_size^2 patches (m^2 w x w), linear_1 (w x H)
    # and linear_2 (H x H), biased when multimodal_projector_bias.
    v = vision_config(config)
    w, i = _vision_int(v, "hidden_size", 1024), _vision_int(v, "intermediate_size", 4096)
    layers = _vision_int(v, "num_hidden_layers", 24)
    patch, channels = _vision_int(v, "patch_size", 16), _vision_int(v, "num_channels", 3)
    merge = _vision_int(config, "spatial_merge_size", 2)
    bias = bool(config.get("multimodal_projector_bias", False))
    values = channels * patch * patch
    encoder = values * w + w + layers * (4 * w * w + 3 * w * i + 2 * w)
    projector = w + merge * merge * w * w + w * text_hidden + text_hidden * text_hidden
    projector += 2 * text_hidden if bias else 0
    # vLLM pixtral.py PixtralHFEncoderInfo: the dummy image is image_size square, one token
    # per merged patch of patch x merge pixels, ((image - 1) // (patch x merge) + 1) a side
    # (the [IMG_BREAK]/[IMG_END] tokens are not embeds, so not counted). Without xformers
    # PixtralHFVisionModel.forward masks attention with transformers'
    # generate_block_attention_mask, one dense patches x patches tensor for the batch.
    side = (_vision_int(v, "image_size", 1024) - 1) // (patch * merge) + 1
    vision = {
        "num_layers": layers,
        "hidden_size": w,
        "intermediate_size": i,
        "patches_per_token": merge * merge,
        "values_per_patch": values,
        "max_tokens_per_item": side * side,
        "dense_block_mask": True,
        "params_override": encoder + projector,
    }
    return vision, (
        f"vision: pixtral vision_config ({layers} layers, width {w}, gated MLP {i}, patch "
        f"{patch}), spatial_merge_size {merge} merger and 2-layer projector to {text_hidden}: "
        f"{encoder + projector} params; largest image {side}x{side} = {side * side} tokens "
        "(vLLM pixtral.py PixtralHFEncoderInfo.get_num_image_tokens)"
    )


def _biased_vit_layer(w: int, i: int) -> int:
    """Parameters of one CLIP-style ViT layer (SigLIP, Llama 4 vision): biased q/k/v/o
    (4w^2 + 4w), a biased GELU MLP (2wi + i + w) and two LayerNorms (4w)."""
    return 4 * w * w + 4 * w + 2 * w * i + i + w + 4 * w


def _siglip_vision(config: Mapping[str, Any], text_hidden: int) -> tuple[Facts, str]:
    # vLLM siglip.py: patch conv with bias, a learned position table of (image/patch)^2
    # rows, per layer biased qkv + out (4w^2 + 4w), a biased GELU MLP (2wi + i + w) and two
    # LayerNorms (4w), a post LayerNorm (2w); no pooling head when vision_use_head is false.
    # gemma3_mm.py projector: mm_soft_emb_norm (w) and mm_input_projection_weight (w x H).
    v = vision_config(config)
    w, i = _vision_int(v, "hidden_size", 768), _vision_int(v, "intermediate_size", 3072)
    layers = _vision_int(v, "num_hidden_layers", 12)
    patch, image = _vision_int(v, "patch_size", 16), _vision_int(v, "image_size", 224)
    channels = _vision_int(v, "num_channels", 3)
    if v.get("vision_use_head"):
        raise ModelDirError(
            "model config sets vision_config.vision_use_head, a SigLIP pooling head servekit "
            "does not count",
            fix="state model.architecture.vision in the profile by hand",
        )
    values = channels * patch * patch
    positions = (image // patch) ** 2
    encoder = values * w + w + positions * w + 2 * w
    encoder += layers * _biased_vit_layer(w, i)
    projector = w + w * text_hidden
    tokens = config.get("mm_tokens_per_image", 256)
    per_token = max(1, positions // tokens) if isinstance(tokens, int) and tokens > 0 else 16
    # vLLM gemma3_mm.py get_num_image_tokens: (crops + 1) x image_seq_length tokens, no crops
    # unless do_pan_and_scan (off by default): the dummy image is one native image of
    # `positions` patches pooled to mm_tokens_per_image tokens.
    per_image = tokens if isinstance(tokens, int) and tokens > 0 else positions // per_token
    vision = {
        "num_layers": layers,
        "hidden_size": w,
        "intermediate_size": i,
        "patches_per_token": per_token,
        "values_per_patch": values,
        "max_tokens_per_item": per_image,
        "patches_per_item": positions,
        "params_override": encoder + projector,
    }
    return vision, (
        f"vision: siglip vision_config ({layers} layers, width {w}, MLP {i}, {positions} "
        f"patches of {patch}), projection to {text_hidden}: {encoder + projector} params; "
        f"{per_image} tokens per image (mm_tokens_per_image; vLLM gemma3_mm.py, no "
        "pan-and-scan crops by default)"
    )


def _llama4_vision(config: Mapping[str, Any], text_hidden: int) -> tuple[Facts, str]:
    # vLLM mllama4.py: a bias-free unfold patch linear, class embedding and (patches + 1)
    # position rows, pre/post LayerNorms; per layer biased qkv + o (4w^2 + 4w), a biased GELU
    # MLP (2wi + i + w) and two LayerNorms (4w). The pixel-shuffle adapter MLP takes
    # intermediate_size -> projector_input_dim -> projector_output_dim (bias when
    # multi_modal_projector_bias), then linear_1 vision_output_dim -> text hidden.
    v = vision_config(config)
    w, i = _vision_int(v, "hidden_size", 768), _vision_int(v, "intermediate_size", 5632)
    layers = _vision_int(v, "num_hidden_layers", 34)
    patch, image = _vision_int(v, "patch_size", 14), _vision_int(v, "image_size", 448)
    channels = _vision_int(v, "num_channels", 3)
    p_in, p_out = (
        _vision_int(v, "projector_input_dim", 4096),
        _vision_int(v, "projector_output_dim", 4096),
    )
    out_dim = _vision_int(v, "vision_output_dim", 7680)
    ratio = v.get("pixel_shuffle_ratio", 0.5)
    if not isinstance(ratio, int | float) or isinstance(ratio, bool) or not 0 < ratio <= 1:
        raise ModelDirError(
            f"model config vision_config.pixel_shuffle_ratio is {shown(ratio)}", fix=FIX
        )
    values = channels * patch * patch
    positions = (image // patch) ** 2 + 1
    encoder = values * w + w + positions * w + 4 * w
    encoder += layers * _biased_vit_layer(w, i)
    adapter = i * p_in + p_in * p_out
    adapter += p_in + p_out if v.get("multi_modal_projector_bias") else 0
    projector = out_dim * text_hidden
    # vLLM mllama4.py: the dummy image is max_patches chunks tall (h:w = 16:1), so the
    # processor cuts LLAMA4_MAX_TILES tiles and adds the global thumbnail; each chunk is
    # (image/patch)^2 // ds_ratio tokens (get_patch_per_chunk) and runs (image/patch)^2 + 1
    # patches (the class token) through the encoder.
    ds_ratio = round(1 / (ratio * ratio))
    chunks = LLAMA4_MAX_TILES + 1
    per_chunk = (image // patch) ** 2 // ds_ratio
    vision = {
        "num_layers": layers,
        "hidden_size": w,
        "intermediate_size": i,
        "patches_per_token": ds_ratio,
        "values_per_patch": values,
        "max_tokens_per_item": chunks * per_chunk,
        "patches_per_item": chunks * positions,
        "params_override": encoder + adapter + projector,
    }
    return vision, (
        f"vision: llama4 vision_config ({layers} layers, width {w}, MLP {i}), pixel-shuffle "
        f"adapter {i}->{p_in}->{p_out} and projector to {text_hidden}: "
        f"{encoder + adapter + projector} params; largest image {chunks} chunks x "
        f"{per_chunk} tokens (vLLM mllama4.py get_image_size_with_most_features, "
        f"max_patches {LLAMA4_MAX_TILES} tiles + the global one)"
    )


def _gemma4_vision(config: Mapping[str, Any], text_hidden: int) -> tuple[Facts, str]:
    # vLLM gemma4_mm.py runs transformers' Gemma4VisionModel (modeling_gemma4.py): a
    # bias-free patch linear and a 2 x position_embedding_size x w position table; per layer
    # q/k/v/o (heads and KV heads of head_dim), q/k RMSNorms, a gated MLP (3wi) and four
    # RMSNorms; std_bias/std_scale buffers when standardize. Gemma4MultimodalEmbedder
    # projects w -> text hidden (a weightless norm, no bias). Pooling merges k^2 patches.
    v = vision_config(config)
    w, i = _vision_int(v, "hidden_size"), _vision_int(v, "intermediate_size")
    layers = _vision_int(v, "num_hidden_layers")
    heads = _vision_int(v, "num_attention_heads")
    kv = _vision_int(v, "num_key_value_heads", heads)
    head_dim = _vision_int(v, "head_dim", w // heads)
    patch, table = _vision_int(v, "patch_size"), _vision_int(v, "position_embedding_size")
    pool = _vision_int(v, "pooling_kernel_size", 3)
    if v.get("use_clipped_linears"):
        raise ModelDirError(
            "model config sets vision_config.use_clipped_linears, clip buffers servekit does "
            "not count",
            fix="state model.architecture.vision in the profile by hand",
        )
    values = 3 * patch * patch
    attention = 2 * w * heads * head_dim + 2 * w * kv * head_dim
    encoder = values * w + 2 * table * w + (2 * w if v.get("standardize") else 0)
    encoder += layers * (attention + 2 * head_dim + 3 * w * i + 4 * w)
    projector = w * text_hidden
    # vLLM gemma4_mm.py get_mm_max_tokens_per_item: an image is default_output_length soft
    # tokens, a video GEMMA4_VIDEO_FRAMES x (GEMMA4_FRAME_TOKENS + boi, eoi and 6 timestamp
    # tokens); vLLM profiles the larger (the video). Each frame is padded to
    # GEMMA4_FRAME_TOKENS x pool^2 patches (the image processor's max_patches).
    image_tokens = _vision_int(v, "default_output_length", 280)
    video_tokens = GEMMA4_VIDEO_FRAMES * (GEMMA4_FRAME_TOKENS + 8)
    if video_tokens >= image_tokens:
        item, patches = video_tokens, GEMMA4_VIDEO_FRAMES * GEMMA4_FRAME_TOKENS * pool * pool
        what = f"a {GEMMA4_VIDEO_FRAMES}-frame video"
    else:
        item, patches, what = image_tokens, image_tokens * pool * pool, "an image"
    vision = {
        "num_layers": layers,
        "hidden_size": w,
        "intermediate_size": i,
        "patches_per_token": pool * pool,
        "values_per_patch": values,
        "max_tokens_per_item": item,
        "patches_per_item": patches,
        "params_override": encoder + projector,
    }
    return vision, (
        f"vision: gemma4 vision_config ({layers} layers, width {w}, gated MLP {i}, position "
        f"table {table}), projection to {text_hidden}: {encoder + projector} params; "
        f"profiled with {what}, {item} tokens, {patches} patches (vLLM gemma4_mm.py "
        "get_mm_max_tokens_per_item)"
    )


VISION: dict[str, Callable[[Mapping[str, Any], int], tuple[Facts, str]]] = {
    "mistral3": _pixtral_vision,
    "gemma3": _siglip_vision,
    "llama4": _llama4_vision,
    "gemma4": _gemma4_vision,
}
