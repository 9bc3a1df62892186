"""Profile file schema (core: edge validation with pydantic, extra keys forbidden).

A profile is the whole deployment as data: model facts, hardware, engine image,
vLLM serve arguments in vLLM's spelling, environment, speculative decoding,
patches, and defaults for validation and load tests. The model, draft and step-time facts
are the dataclasses of `servekit.specs`, validated here as they are (one definition each).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    field_validator,
    model_validator,
)

from servekit.specs import ArchitectureSpec, DraftFacts, QuantizedLayers, StepTimeParams


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_MAX_SUGGESTED_TP = 64


def divisors(n: int) -> list[int]:
    """Every positive divisor of `n` in ascending order, in O(sqrt n) steps."""
    small: list[int] = []
    large: list[int] = []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


def tensor_parallel_error(
    arch: ArchitectureSpec, tp: int, *, raise_as: type[Exception] = ValueError
) -> None:
    """Raise when a TP size cannot shard the model's attention heads.

    Args:
        arch: the model's architecture facts.
        tp: tensor_parallel_size.
        raise_as: exception class to raise (ValueError inside pydantic validation).
    """
    heads = arch.num_attention_heads
    if arch.attention != "mla" and heads % arch.num_kv_heads:
        raise raise_as(
            f"num_attention_heads {heads} is not a multiple of num_kv_heads {arch.num_kv_heads}: "
            "grouped-query attention shares each KV head among a whole group of query heads; "
            "check the model's architecture facts"
        )
    if heads % tp:
        sizes = [d for d in divisors(heads) if d <= _MAX_SUGGESTED_TP]
        raise raise_as(
            f"tensor_parallel_size {tp} does not divide the {heads} attention heads; "
            f"use one of: {', '.join(map(str, sizes))}"
        )
    kv = arch.num_kv_heads
    if arch.attention != "mla" and kv % tp and tp % kv:
        raise raise_as(
            f"tensor_parallel_size {tp} neither divides nor is a multiple of the {kv} KV heads; "
            "choose a size that divides the KV heads or is a multiple of them"
        )


class ModelSection(_Strict):
    """Where the checkpoint is and what it is."""

    path: str = Field(min_length=1, description="checkpoint path as the engine sees it")
    quantization: str = "bf16"
    quantized_layers: QuantizedLayers = Field(
        default="linear",
        description="which linear layers the quantization covers: 'linear' (all but embeddings, "
        "LM head, norms and routers) or 'experts' (routed experts only)",
    )
    architecture: ArchitectureSpec | None = None
    sources: list[str] = Field(default_factory=list)


class HardwareSection(_Strict):
    """The GPUs the deployment runs on."""

    gpu: str
    gpus_per_node: int = Field(gt=0, le=1024)
    nodes: int = Field(default=1, gt=0, le=1 << 16)


class Patch(_Strict):
    """A source patch applied to the engine image before use (`servekit image build`)."""

    name: str = Field(description="short file-safe name; labels the image and names its file")
    url: str = Field(
        description="where the unified diff is: an http(s) URL (downloaded at build time, "
        "e.g. https://github.com/vllm-project/vllm/pull/49149.diff), a file:// URL or a "
        "local file path (relative paths are resolved against the current directory); "
        "only its files under vllm/ are applied to the installed package"
    )
    description: str = ""


class EngineSection(_Strict):
    """The vLLM engine image and version."""

    image: str
    version: str
    patched_image_tag: str | None = None
    patches: list[Patch] = Field(default_factory=list)


class ServeArgs(_Strict):
    """`vllm serve` arguments in vLLM's own spelling; rendered in declaration order."""

    # upper bounds: sanity limits far past real deployments (typos, not configurations)
    block_size: int | None = Field(default=None, gt=0, le=1 << 16)
    max_model_len: int = Field(gt=0, le=1 << 27)
    tensor_parallel_size: int = Field(default=1, gt=0, le=1 << 12)
    pipeline_parallel_size: int | None = Field(default=None, gt=0, le=1 << 12)
    data_parallel_size: int | None = Field(default=None, gt=0, le=1 << 16)
    decode_context_parallel_size: int | None = Field(default=None, gt=0, le=1 << 12)
    enable_expert_parallel: bool | None = None
    max_num_seqs: int = Field(default=256, gt=0, le=1 << 20)
    max_num_batched_tokens: int = Field(default=8192, gt=0, le=1 << 27)
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    served_model_name: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool | None = None
    reasoning_parser: str | None = None
    default_chat_template_kwargs: dict[str, JsonValue] | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    trust_remote_code: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    enforce_eager: bool | None = None
    max_cudagraph_capture_size: int | None = Field(default=None, gt=0, le=1 << 20)
    language_model_only: bool | None = None
    skip_mm_profiling: bool | None = None
    limit_mm_per_prompt: dict[str, JsonValue] | None = None
    chat_template: str | None = None
    generation_config: str | None = None
    compilation_config: dict[str, JsonValue] | None = None
    mm_encoder_tp_mode: Literal["weights", "data"] | None = None
    extra_args: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="any other vLLM flag, by its vLLM name, rendered verbatim",
    )

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _utilization_in_range(cls, value: float) -> float:
        if not 0 < value <= 1:
            raise ValueError(
                f"gpu_memory_utilization {value} is outside (0, 1]; "
                "use a fraction of each GPU's total memory such as 0.9"
            )
        return value


class SpeculativeConfig(_Strict):
    """vLLM's --speculative-config, rendered as JSON with these keys."""

    method: Literal["eagle", "eagle3", "draft_model", "mtp", "ngram", "medusa", "suffix"]
    model: str | None = None
    num_speculative_tokens: int = Field(gt=0, le=1 << 10)
    attention_backend: str | None = None
    draft_tensor_parallel_size: int | None = Field(default=None, gt=0)
    disable_by_batch_size: int | None = Field(
        default=None, gt=0, description="V0 engines only: no effect since vLLM v0.10.0"
    )
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = Field(
        default=None,
        description="dynamic speculative decoding: [[first_batch, last_batch, k], ...]",
    )
    prompt_lookup_max: int | None = Field(default=None, gt=0)
    prompt_lookup_min: int | None = Field(default=None, gt=0)


class Speculative(_Strict):
    """Speculative decoding: the vLLM config plus the draft's facts."""

    config: SpeculativeConfig
    draft: DraftFacts | None = None


class SimulatorSection(_Strict):
    """The built-in simulator's parameters for this deployment."""

    step: StepTimeParams
    acceptance: dict[float, list[float]] = Field(
        default_factory=dict,
        description="temperature -> conditional acceptance probability per draft position",
    )
    input_len: int | None = Field(default=None, gt=0, description="input length calibrated at")
    sources: list[str] = Field(default_factory=list)


class DeploySection(_Strict):
    """How the rendered artifacts expose and mount things."""

    port: int = Field(default=8000, gt=0, lt=65536)
    bind_host: str = Field(
        default="127.0.0.1",
        description="host address the port is published on; 0.0.0.0 exposes it to the network",
    )
    host_model_dir: str | None = None
    container_model_dir: str = "/models"
    shm_size: str | None = None
    startup_timeout_s: int = Field(default=1800, gt=0)
    namespace: str = "default"
    network: Literal["bridge", "host"] = Field(
        default="bridge",
        description="container networking (docker, compose): bridge publishes the engine's "
        "port 8000 on bind_host:port; host shares the host's network, and the engine itself "
        "listens on bind_host:port",
    )
    kubernetes_version: str = Field(
        default="1.37",
        pattern=r"^1\.[0-9]{1,3}$",
        description="the Kubernetes minor release the manifests target (checked against its "
        "OpenAPI schemas)",
    )


class ValidateDefaults(_Strict):
    """Defaults for `servekit validate` against this deployment."""

    ladder: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16])
    long_context_tokens: int | None = Field(default=None, gt=0)
    thinking_kwargs: dict[str, JsonValue] | None = None


class BenchDefaults(_Strict):
    """Defaults for `servekit bench` against this deployment."""

    concurrency: list[int] = Field(default_factory=lambda: [1, 4, 16, 128])
    input_len: int = Field(default=1024, gt=0)
    output_len: int = Field(default=128, gt=0)
    per_stream_target_tok_s: float | None = Field(default=None, gt=0)


class Calibration(_Strict):
    """Overheads measured from a real vLLM startup log (`servekit plan --calibrate-from-log`),
    used by the plan in place of the modelled terms for this GPU and engine version."""

    gpu: str = Field(min_length=1, description="the catalog GPU the log ran on")
    engine_version: str = Field(min_length=1, description="the vLLM version the log ran")
    non_kv_overhead_gib: float = Field(
        ge=0,
        le=1024,
        description="measured activation peak + non-torch memory per GPU: requested - "
        "weights - available KV cache (- the CUDA-graph estimate when it is in the budget)",
    )
    cuda_graph_gib: float | None = Field(
        default=None, ge=-64, le=1024, description="CUDA-graph memory the log captured/estimated"
    )
    source: str = Field(min_length=1, description='"measured from <log file> on <date>"')


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_PROFILE_NAME_CHARS = 100


def profile_name_problem(name: object) -> str | None:
    """What makes `name` unusable as a profile (and file) name, or None when it is fine."""
    if not isinstance(name, str):
        return f"a profile name must be text, not {type(name).__name__}"
    if len(name) > MAX_PROFILE_NAME_CHARS:
        return f"a profile name is at most {MAX_PROFILE_NAME_CHARS} characters"
    if _PROFILE_NAME.fullmatch(name) is None:
        return (
            "a profile name uses letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    return None


def safe_profile_name(text: str) -> str:
    """A valid profile name made from `text` (for suggesting a fix, never a path)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", text).lstrip(".-_")[:MAX_PROFILE_NAME_CHARS]
    return safe.rstrip(".-") or "my-profile"


def _check_env_name(name: str) -> str:
    if _ENV_NAME.fullmatch(name) is None:
        raise ValueError(
            f"env name {name!r} is not a valid variable name; use letters, digits and "
            "underscores, not starting with a digit"
        )
    return name


EnvName = Annotated[str, AfterValidator(_check_env_name)]


class Profile(_Strict):
    """A whole deployment profile, after `extends:` has been merged."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=MAX_PROFILE_NAME_CHARS)
    description: str = ""
    model: ModelSection
    hardware: HardwareSection
    engine: EngineSection
    serve_args: ServeArgs
    env: dict[EnvName, str] = Field(default_factory=dict)
    secret_env: list[EnvName] = Field(
        default_factory=list,
        description="variables the engine needs whose values are secrets (HF_TOKEN): taken "
        "from the launching environment (a Kubernetes Secret for k8s), never written to "
        "profiles, artifacts, logs or state",
    )
    speculative: Speculative | None = None
    deploy: DeploySection = Field(default_factory=DeploySection)
    validate_defaults: ValidateDefaults = Field(default_factory=ValidateDefaults, alias="validate")
    bench_defaults: BenchDefaults = Field(default_factory=BenchDefaults, alias="bench")
    simulator: SimulatorSection | None = None
    calibration: list[Calibration] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _secrets_are_not_plain_env(self) -> Profile:
        both = sorted(set(self.secret_env) & set(self.env))
        if both:
            raise ValueError(
                f"{', '.join(both)} is in both env and secret_env; a secret's value must not "
                "be in the profile: remove it from env"
            )
        return self

    @model_validator(mode="after")
    def _parallelism_uses_the_gpus(self) -> Profile:
        args = self.serve_args
        tp = args.tensor_parallel_size
        if self.model.architecture is not None:
            tensor_parallel_error(self.model.architecture, tp)
        pp = args.pipeline_parallel_size or 1
        dp = args.data_parallel_size or 1
        gpus = self.hardware.nodes * self.hardware.gpus_per_node
        if tp * pp * dp != gpus:
            raise ValueError(
                f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} x data_parallel_size "
                f"{dp} = {tp * pp * dp} GPUs, but hardware has {gpus} "
                f"({self.hardware.nodes} node(s) x {self.hardware.gpus_per_node}); make them equal"
            )
        return self


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, mappings merged key by key: what `extends:` does to a profile."""
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
