"""Tests for the safetensors checkpoint reader and config.json architecture facts."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter
from safetensors.numpy import save_file

from servekit.errors import ModelDirError
from servekit.plan.checkpoint import (
    GROUPS,
    architecture_from_config,
    read_checkpoint,
    tensor_group,
)

HIDDEN, INTER, VOCAB, HEAD_DIM = 8, 16, 32, 4
F32, F16, I8 = np.float32, np.float16, np.int8

# name -> (shape, numpy dtype, group the reader must put it in)
Toy = dict[str, tuple[tuple[int, ...], type, str]]


def llama_toy() -> Toy:
    """A 2-layer Llama-shaped checkpoint: 2 query heads, 1 KV head."""
    toy: Toy = {
        "model.embed_tokens.weight": ((VOCAB, HIDDEN), F32, "embeddings"),
        "model.norm.weight": ((HIDDEN,), F32, "other"),
        "lm_head.weight": ((VOCAB, HIDDEN), F16, "embeddings"),
    }
    for i in range(2):
        p = f"model.layers.{i}"
        toy |= {
            f"{p}.self_attn.q_proj.weight": ((2 * HEAD_DIM, HIDDEN), F32, "attention"),
            f"{p}.self_attn.k_proj.weight": ((HEAD_DIM, HIDDEN), F32, "attention"),
            f"{p}.self_attn.v_proj.weight": ((HEAD_DIM, HIDDEN), F32, "attention"),
            f"{p}.self_attn.o_proj.weight": ((HIDDEN, 2 * HEAD_DIM), F32, "attention"),
            f"{p}.mlp.gate_proj.weight": ((INTER, HIDDEN), F32, "dense_mlp"),
            f"{p}.mlp.up_proj.weight": ((INTER, HIDDEN), F32, "dense_mlp"),
            f"{p}.mlp.down_proj.weight": ((HIDDEN, INTER), F32, "dense_mlp"),
            f"{p}.input_layernorm.weight": ((HIDDEN,), F32, "other"),
            f"{p}.post_attention_layernorm.weight": ((HIDDEN,), F32, "other"),
        }
    return toy


def moe_toy() -> Toy:
    """A DeepSeek-shaped MoE layer with MLA, an indexer, int8 weights, scales and a vision block."""
    p = "model.layers.1"
    toy: Toy = {
        "model.embed_tokens.weight": ((VOCAB, HIDDEN), F16, "embeddings"),
        f"{p}.self_attn.q_a_proj.weight": ((4, HIDDEN), I8, "attention"),
        f"{p}.self_attn.q_a_proj.weight_scale_inv": ((1, 1), F32, "attention"),
        f"{p}.self_attn.q_a_layernorm.weight": ((4,), F16, "other"),
        f"{p}.self_attn.q_b_proj.weight": ((12, 4), I8, "attention"),
        f"{p}.self_attn.kv_a_proj_with_mqa.weight": ((6, HIDDEN), I8, "attention"),
        f"{p}.self_attn.kv_a_layernorm.weight": ((4,), F16, "other"),
        f"{p}.self_attn.kv_b_proj.weight": ((16, 4), I8, "attention"),
        f"{p}.self_attn.o_proj.weight": ((HIDDEN, 8), I8, "attention"),
        f"{p}.self_attn.indexer.wk.weight": ((4, HIDDEN), F16, "attention"),
        f"{p}.self_attn.k_scale": ((1,), F32, "other"),
        f"{p}.mlp.gate.weight": ((2, HIDDEN), F32, "other"),
        f"{p}.mlp.gate.e_score_correction_bias": ((2,), F32, "other"),
        f"{p}.mlp.shared_experts.gate_proj.weight": ((INTER, HIDDEN), I8, "experts"),
        f"{p}.mlp.shared_experts.down_proj.weight": ((HIDDEN, INTER), I8, "experts"),
        "model.layers.0.mlp.down_proj.weight": ((HIDDEN, INTER), I8, "dense_mlp"),
        "model.visual.blocks.0.attn.qkv.weight": ((24, HIDDEN), F16, "other"),
        "model.visual.blocks.0.mlp.fc1.weight": ((INTER, HIDDEN), F16, "other"),
    }
    for e in range(2):
        for proj, shape in (("gate_proj", (INTER, HIDDEN)), ("down_proj", (HIDDEN, INTER))):
            name = f"{p}.mlp.experts.{e}.{proj}.weight"
            toy[name] = (shape, I8, "experts")
            toy[f"{name}_scale_inv"] = ((1, 1), F32, "experts")
    return toy


def arrays(toy: Toy) -> dict[str, np.ndarray[Any, Any]]:
    """Materialize a toy as numpy arrays with distinct contents."""
    return {
        name: np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
        for name, (shape, dtype, _) in toy.items()
    }


def expected_groups(toy: Toy) -> dict[str, int]:
    """Sum each toy tensor's numpy nbytes into the group the toy says it belongs to."""
    groups = dict.fromkeys(GROUPS, 0)
    for name, array in arrays(toy).items():
        groups[toy[name][2]] += array.nbytes
    return groups


def write_model(root: Path, tensors: dict[str, np.ndarray[Any, Any]], **config: Any) -> Path:
    """Write config.json and a single model.safetensors shard."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "toy", **config}))
    save_file(tensors, str(root / "model.safetensors"))
    return root


def framed(header: bytes) -> bytes:
    """Prefix a header with its true little-endian u64 length."""
    return struct.pack("<Q", len(header)) + header


def write_raw_shard(
    path: Path, header: bytes, data: bytes = b"", *, declared: int | None = None
) -> None:
    """Write a safetensors file byte by byte, optionally lying about the header length."""
    length = len(header) if declared is None else declared
    path.write_bytes(struct.pack("<Q", length) + header + data)


def test_llama_group_bytes_equal_numpy_nbytes(tmp_path: Path) -> None:
    """Group bytes of a Llama-shaped toy equal the numpy nbytes summed per group."""
    toy = llama_toy()
    info = read_checkpoint(write_model(tmp_path, arrays(toy), hidden_size=HIDDEN))
    assert info.group_bytes == expected_groups(toy)
    assert info.total_bytes == sum(a.nbytes for a in arrays(toy).values())
    assert info.tensor_count == len(toy)
    assert info.shard_count == 1
    assert info.config == {"model_type": "toy", "hidden_size": HIDDEN}
    assert info.model_dir == tmp_path


def test_dtype_bytes_are_tallied_by_safetensors_code(tmp_path: Path) -> None:
    """Bytes per dtype are keyed by the safetensors dtype code."""
    info = read_checkpoint(write_model(tmp_path, arrays(llama_toy())))
    assert info.dtypes == {"F16": VOCAB * HIDDEN * 2, "F32": info.total_bytes - VOCAB * HIDDEN * 2}


def test_moe_experts_shared_experts_scales_and_vision_grouped(tmp_path: Path) -> None:
    """Routed and shared experts go to experts, routers, norms, KV scales and vision to other."""
    toy = moe_toy()
    info = read_checkpoint(write_model(tmp_path, arrays(toy)))
    assert info.group_bytes == expected_groups(toy)
    assert info.dtypes.keys() == {"F16", "F32", "I8"}


def test_sharded_checkpoint_reads_shards_listed_in_index(tmp_path: Path) -> None:
    """With an index, exactly the listed shards are read and bytes match the unsharded sum."""
    toy = llama_toy()
    tensors = arrays(toy)
    names = sorted(tensors)
    halves = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    (tmp_path / "config.json").write_text("{}")
    for shard, members in halves.items():
        save_file({n: tensors[n] for n in members}, str(tmp_path / shard))
    weight_map = {n: shard for shard, members in halves.items() for n in members}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    save_file({"stray": np.zeros(4, F32)}, str(tmp_path / "stray.safetensors"))

    info = read_checkpoint(tmp_path)
    assert info.shard_count == 2
    assert info.tensor_count == len(toy)
    assert info.group_bytes == expected_groups(toy)


def test_missing_shard_error_names_the_file_and_fix(tmp_path: Path) -> None:
    """A shard listed in the index but absent raises ModelDirError naming it and the fix."""
    save_file({"a": np.zeros(2, F32)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    (tmp_path / "config.json").write_text("{}")
    weight_map = {
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors",
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ModelDirError) as caught:
        read_checkpoint(tmp_path)
    message = str(caught.value)
    assert "model-00002-of-00002.safetensors" in message
    assert "model-00001-of-00002.safetensors" not in message
    assert str(tmp_path) in message
    assert "download the missing shard(s)" in message


def test_missing_config_json_raises(tmp_path: Path) -> None:
    """A directory without config.json raises ModelDirError naming config.json."""
    save_file({"a": np.zeros(2, F32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelDirError, match=r"config\.json"):
        read_checkpoint(tmp_path)


def test_directory_without_shards_raises(tmp_path: Path) -> None:
    """A directory with a config but no safetensors files raises ModelDirError."""
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelDirError, match=r"no \*\.safetensors"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        (b"\x01\x02", "too short"),
        (b"this is not a safetensors file at all", "over the format's 100000000-byte limit"),
        (b"\x40\x00\x00\x00\x00\x00\x00\x00{}", r"header longer than the file \(10 bytes\)"),
        (struct.pack("<Q", 1000) + b'{"a": {"dtype": "F32"', "header longer than the file"),
        (framed(b"not json"), "not JSON"),
        (framed(b"[]"), "not a JSON object"),
        (framed(b'{"a": {"dtype": "F32"}}'), "needs a dtype, a shape"),
    ],
    ids=["short", "garbage", "past-end", "truncated-header", "bad-json", "json-array", "bad-entry"],
)
def test_malformed_shard_raises_naming_file(tmp_path: Path, content: bytes, pattern: str) -> None:
    """A truncated or garbage shard raises ModelDirError naming the file and what is wrong."""
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "broken.safetensors").write_bytes(content)
    with pytest.raises(ModelDirError, match=pattern) as caught:
        read_checkpoint(tmp_path)
    assert "broken.safetensors" in str(caught.value)


def test_data_offsets_past_end_of_file_raise(tmp_path: Path) -> None:
    """A shard whose tensor data was cut off raises ModelDirError about data_offsets."""
    root = write_model(tmp_path, {"w": np.zeros((4, 4), F32)})
    shard = root / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-8])
    with pytest.raises(ModelDirError, match=r"data_offsets \[0, 64\] outside the 56-byte"):
        read_checkpoint(root)


def test_byte_count_disagreeing_with_dtype_and_shape_raises(tmp_path: Path) -> None:
    """data_offsets spanning other than dtype x prod(shape) bytes raise ModelDirError."""
    (tmp_path / "config.json").write_text("{}")
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})
    write_raw_shard(tmp_path / "odd.safetensors", header.encode(), bytes(8))
    with pytest.raises(ModelDirError, match=r"BF16 \[2, 3\], which is 12 bytes.*span 8 bytes"):
        read_checkpoint(tmp_path)


def test_unknown_dtype_counts_offset_bytes_without_cross_check(tmp_path: Path) -> None:
    """A dtype outside the table is counted by its data_offsets alone; metadata is skipped."""
    (tmp_path / "config.json").write_text("{}")
    header = {
        "__metadata__": {"format": "pt"},
        "model.layers.0.mlp.up_proj.weight": {
            "dtype": "Q4_FUTURE",
            "shape": [7, 3],
            "data_offsets": [0, 10],
        },
    }
    write_raw_shard(tmp_path / "q.safetensors", json.dumps(header).encode(), bytes(10))
    info = read_checkpoint(tmp_path)
    assert info.dtypes == {"Q4_FUTURE": 10}
    assert info.group_bytes["dense_mlp"] == 10
    assert info.tensor_count == 1


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("transformer.wte.weight", "embeddings"),
        ("output.weight", "embeddings"),
        ("tok_embeddings.weight", "embeddings"),
        ("encoder.layer.0.output.weight", "other"),
        ("model.layers.61.shared_head.head.weight", "embeddings"),
        ("model.layers.0.block_sparse_moe.experts.3.w1.weight", "experts"),
        ("model.layers.0.block_sparse_moe.gate.weight", "other"),
        ("model.layers.0.mlp.experts.gate_up_proj_blocks", "experts"),
        ("model.layers.0.mlp.router.weight", "other"),
        ("model.layers.0.mlp.shared_expert.up_proj.weight", "experts"),
        ("model.layers.0.mlp.shared_expert_gate.weight", "other"),
        ("model.layers.0.linear_attn.in_proj_qkvz.weight", "attention"),
        ("model.layers.0.self_attn.q_norm.weight", "other"),
        ("model.layers.0.feed_forward.w2.weight", "dense_mlp"),
        ("transformer.h.0.ln_1.weight", "other"),
        ("model.vision_tower.blocks.0.attn.proj.weight", "other"),
    ],
)
def test_tensor_group_known_names(name: str, group: str) -> None:
    """Known tensor names from common checkpoints map to the documented group."""
    assert tensor_group(name) == group


LLAMA_31_70B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "rope_theta": 500000.0,
}

DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _dump(facts: object, *, exclude_none: bool = False) -> object:
    """The facts as plain data, the way pydantic dumps them."""
    return TypeAdapter(type(facts)).dump_python(facts, exclude_none=exclude_none)


def test_llama_31_70b_config_facts() -> None:
    """A Llama-3.1-70B config gives full attention, GQA 64/8 and head_dim 8192/64."""
    facts = architecture_from_config(LLAMA_31_70B)
    assert _dump(facts, exclude_none=True) == {
        "attention": "full",
        "num_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_kv_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "intermediate_size": 28672,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "attention_sinks": False,
        "embeddings_on_every_stage": False,
    }


def test_deepseek_v3_config_gives_mla_and_moe_facts() -> None:
    """A DeepSeek-V3 config gives MLA facts, head_dim nope+rope and the MoE facts."""
    facts = architecture_from_config(DEEPSEEK_V3)
    assert facts.attention == "mla"
    assert facts.head_dim == 192
    assert facts.mla is not None
    assert _dump(facts.mla) == {
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "q_lora_rank": 1536,
    }
    assert facts.moe is not None
    assert _dump(facts.moe) == {
        "num_experts": 256,
        "top_k": 8,
        "expert_intermediate_size": 2048,
        "num_shared_experts": 1,
        "shared_expert_intermediate_size": None,
        "first_dense_layers": 3,
        "layer_step": 1,
        "expert_bias": False,
    }
    assert facts.intermediate_size == 18432


def test_mixtral_config_uses_intermediate_size_for_experts() -> None:
    """Mixtral's num_local_experts and intermediate_size give the expert facts."""
    config = {
        **LLAMA_31_70B,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    facts = architecture_from_config(config)
    assert facts.moe is not None
    assert (facts.moe.num_experts, facts.moe.top_k, facts.moe.expert_intermediate_size) == (
        8,
        2,
        14336,
    )
    assert facts.moe.num_shared_experts == 0


def test_multimodal_config_reads_text_backbone() -> None:
    """A multimodal config's text_config supplies the facts; top-level keys fill gaps."""
    text = {k: v for k, v in LLAMA_31_70B.items() if k != "torch_dtype"}
    config = {
        "text_config": {**text, "head_dim": 256},
        "vision_config": {"hidden_size": 1152},
        "hidden_size": 1152,
        "torch_dtype": "float16",
    }
    facts = architecture_from_config(config)
    assert (facts.hidden_size, facts.head_dim, facts.num_layers, facts.dtype) == (
        8192,
        256,
        80,
        "float16",
    )


def test_missing_required_key_names_it() -> None:
    """A config without num_hidden_layers raises ModelDirError naming the key."""
    config = {k: v for k, v in LLAMA_31_70B.items() if k != "num_hidden_layers"}
    with pytest.raises(ModelDirError, match="no 'num_hidden_layers'"):
        architecture_from_config(config)


def test_missing_mla_key_names_it() -> None:
    """An MLA config without v_head_dim raises ModelDirError naming the key."""
    config = {k: v for k, v in DEEPSEEK_V3.items() if k != "v_head_dim"}
    with pytest.raises(ModelDirError, match="no 'v_head_dim'"):
        architecture_from_config(config)


def test_non_integer_value_and_out_of_range_fact_raise() -> None:
    """A non-integer size or a value the schema rejects raises ModelDirError."""
    with pytest.raises(ModelDirError, match="'hidden_size' is '8192', not an integer"):
        architecture_from_config({**LLAMA_31_70B, "hidden_size": "8192"})
    with pytest.raises(ModelDirError, match="model config gives an invalid dtype"):
        architecture_from_config({**LLAMA_31_70B, "torch_dtype": "int4"})


def test_zero_heads_is_one_line_error() -> None:
    """A config with zero attention heads is a one-line ModelDirError, not a crash."""
    config = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 0,
        "vocab_size": 128,
        "intermediate_size": 128,
    }
    with pytest.raises(ModelDirError) as info:
        architecture_from_config(config)
    assert "num_attention_heads" in str(info.value)
    assert "\n" not in str(info.value)


def test_oversized_header_length_is_refused(tmp_path: Path) -> None:
    """A header length over the format's 100 MB limit is refused before anything is read."""
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    shard = tmp_path / "model.safetensors"
    with shard.open("wb") as f:  # a sparse file larger than the declared header
        f.write(struct.pack("<Q", 200_000_000))
        f.seek(300_000_000)
        f.write(b"\0")
    with pytest.raises(ModelDirError, match="over the format's 100000000-byte limit"):
        read_checkpoint(tmp_path)
