"""A small sharded safetensors checkpoint on disk, for doctor's model-directory checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def write_model(root: Path, shards: int = 2) -> None:
    """Write config.json, `shards` shards of one 64x64 float32 tensor each, and the index."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({f"layer{i}.weight": np.zeros((64, 64), dtype=np.float32)}, str(root / name))
        weight_map[f"layer{i}.weight"] = name
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
