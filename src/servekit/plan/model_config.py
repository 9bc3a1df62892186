"""Model facts from a Hugging Face `config.json` (core): architecture and quantization.

`model_facts_from_config` is the one place a config dict becomes planner facts: the
architecture (`servekit.specs.ArchitectureSpec`), the checkpoint's quantization scheme
and which layers it covers, and where each fact came from. It is pure; reading files
is `servekit.plan.checkpoint`'s job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servekit.specs import ArchitectureSpec, QuantizedLayers


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What a model's config says the planner needs.

    Attributes:
        model_type: the config's `model_type` (the text backbone's for multimodal configs).
        architecture: the validated architecture facts.
        quantization: the quantization scheme name (`servekit.plan.quantization.SCHEMES`).
        quantized_layers: which linear layers the scheme covers.
        sources: one line per derived fact: which config key(s) it came from.
    """

    model_type: str
    architecture: ArchitectureSpec
    quantization: str = "bf16"
    quantized_layers: QuantizedLayers = "linear"
    sources: tuple[str, ...] = field(default=())


def model_facts_from_config(config: Mapping[str, Any]) -> ModelFacts:
    """Return the planner facts a Hugging Face `config.json` states.

    Raises:
        ModelDirError: a required key is missing, a value is out of range, or the
            `model_type` is not one servekit knows (the message names the keys it needs).
    """
    from servekit.plan.checkpoint import architecture_from_config  # to be replaced (#15)

    arch = architecture_from_config(config)
    return ModelFacts(model_type=str(config.get("model_type", "")), architecture=arch)
