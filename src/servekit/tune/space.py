"""The search space of `servekit tune` (core): dimensions, candidates, profile variants.

A candidate is one value of every dimension: max_num_seqs, max_num_batched_tokens,
speculative decoding (off, k drafts always, k drafts up to a batch size, or an explicit
per-batch-size schedule), gpu_memory_utilization, the CUDA-graph estimate flag
(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS), the tensor x data parallel split of the GPUs,
prefix caching, chunked prefill and max_model_len. Defaults come from the profile
(`default_space`); a space file (YAML, `SpaceFile`) replaces any dimension. A candidate
becomes a profile through `variant`, which re-validates it as a profile like any other; its
`overrides` are what a profile that `extends:` the input profile must say.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servekit.errors import ConfigError, UsageError
from servekit.plan.engine_rules import ESTIMATE_CUDAGRAPHS_ENV
from servekit.profiles.schema import Profile, deep_merge

MAX_CANDIDATES = 200_000
"""Most candidates a space may describe (their plans alone would take minutes past this)."""


@dataclass(frozen=True, slots=True, order=True)
class Speculation:
    """Speculative decoding of a candidate.

    Attributes:
        k: draft tokens per step (0: off).
        schedule: vLLM's num_speculative_tokens_per_batch_size, ((first, last, k), ...),
            or None for k at every batch size.
    """

    k: int = 0
    schedule: tuple[tuple[int, int, int], ...] | None = None

    @property
    def on(self) -> bool:
        """True when any batch size drafts."""
        return self.k > 0

    def label(self) -> str:
        """Short text: off, k3, or k3 up to batch 8 (k3<=8), or the schedule."""
        if not self.on:
            return "off"
        if self.schedule is None:
            return f"k{self.k}"
        upto = up_to_batch(self.schedule)
        if upto is not None:
            return f"k{self.k}<={upto}"
        return "k" + "/".join(f"{a}-{b}:{k}" for a, b, k in self.schedule)


def up_to_batch(schedule: Sequence[tuple[int, int, int]]) -> int | None:
    """B when the schedule is 'k drafts up to batch B, none above', else None."""
    if len(schedule) == 2 and schedule[0][0] == 1 and schedule[1][2] == 0:
        return schedule[0][1] if schedule[1][0] == schedule[0][1] + 1 else None
    return None


def on_up_to(k: int, batch: int, max_num_seqs: int) -> Speculation:
    """k drafts up to batch size `batch`, none above (vLLM's dynamic speculative decoding)."""
    return Speculation(k, ((1, batch, k), (batch + 1, max(max_num_seqs, batch + 1), 0)))


@dataclass(frozen=True, slots=True, order=True)
class Settings:
    """One candidate's settings (None: as the profile has it)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    speculation: Speculation
    gpu_memory_utilization: float
    estimate_cudagraphs: bool | None
    tensor_parallel_size: int
    data_parallel_size: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    max_model_len: int

    @property
    def gpus(self) -> int:
        """GPUs the candidate uses (tensor x data parallel)."""
        return self.tensor_parallel_size * self.data_parallel_size

    def label(self) -> str:
        """A compact, stable description."""
        parts = [
            f"seqs={self.max_num_seqs}",
            f"batched={self.max_num_batched_tokens}",
            f"spec={self.speculation.label()}",
            f"gmu={self.gpu_memory_utilization:g}",
        ]
        if self.estimate_cudagraphs is not None:
            parts.append(f"graph-estimate={'on' if self.estimate_cudagraphs else 'off'}")
        parts.append(f"tp{self.tensor_parallel_size}xdp{self.data_parallel_size}")
        if not self.enable_prefix_caching:
            parts.append("prefix-cache=off")
        if not self.enable_chunked_prefill:
            parts.append("chunked=off")
        parts.append(f"len={self.max_model_len}")
        return " ".join(parts)

    def ident(self) -> str:
        """A short stable id (hash of the label)."""
        return "c" + hashlib.sha256(self.label().encode()).hexdigest()[:10]


@dataclass(frozen=True, slots=True)
class Space:
    """The values of every dimension."""

    max_num_seqs: tuple[int, ...]
    max_num_batched_tokens: tuple[int, ...]
    speculation: tuple[Speculation, ...]
    gpu_memory_utilization: tuple[float, ...]
    estimate_cudagraphs: tuple[bool | None, ...]
    parallel: tuple[tuple[int, int], ...]
    enable_prefix_caching: tuple[bool, ...]
    enable_chunked_prefill: tuple[bool, ...]
    max_model_len: tuple[int, ...]

    @property
    def size(self) -> int:
        """Number of candidates."""
        n = 1
        for values in self.dimensions().values():
            n *= len(values)
        return n

    def dimensions(self) -> dict[str, tuple[Any, ...]]:
        """Each dimension's values, by name."""
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "speculative": self.speculation,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "estimate_cudagraphs": self.estimate_cudagraphs,
            "parallel": self.parallel,
            "enable_prefix_caching": self.enable_prefix_caching,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "max_model_len": self.max_model_len,
        }

    def candidates(self) -> Iterator[Settings]:
        """Every combination, in a fixed order."""
        for mns, mbt, spec, gmu, est, (tp, dp), pc, cp, mml in itertools.product(
            *self.dimensions().values()
        ):
            yield Settings(mns, mbt, _fit_schedule(spec, mns), gmu, est, tp, dp, pc, cp, mml)


def _fit_schedule(spec: Speculation, max_num_seqs: int) -> Speculation:
    """'k up to batch B' schedules end at the candidate's max_num_seqs."""
    if spec.schedule is not None and (upto := up_to_batch(spec.schedule)) is not None:
        return on_up_to(spec.k, upto, max_num_seqs)
    return spec


# ---------------------------------------------------------------------------------------------
# Defaults from the profile, and the space file.


def profile_speculation(profile: Profile) -> Speculation:
    """The profile's own speculative decoding: off, k drafts, or its per-batch schedule."""
    config = profile.speculative.config if profile.speculative else None
    if config is None:
        return Speculation()
    schedule = config.num_speculative_tokens_per_batch_size
    return Speculation(config.num_speculative_tokens, tuple(schedule) if schedule else None)


def as_is_settings(
    profile: Profile, *, estimate_cudagraphs: bool | None, needed_len: int
) -> Settings:
    """The profile's own settings as a candidate: the profile as the user gave it.

    What the profile leaves unset is taken as the default space takes it (max_num_seqs 256,
    max_num_batched_tokens 8192, gpu_memory_utilization 0.9, max_model_len the workload's
    longest request, every GPU of the node in data parallel beside its tensor parallel).

    Args:
        profile: the deployment to tune.
        estimate_cudagraphs: the CUDA-graph estimate flag as the profile's release and env
            have it (None: the release has no such flag).
        needed_len: tokens the workload's longest request needs.
    """
    args = profile.serve_args
    return Settings(
        max_num_seqs=args.max_num_seqs or 256,
        max_num_batched_tokens=args.max_num_batched_tokens or 8192,
        speculation=profile_speculation(profile),
        gpu_memory_utilization=args.gpu_memory_utilization or 0.9,
        estimate_cudagraphs=estimate_cudagraphs,
        tensor_parallel_size=args.tensor_parallel_size,
        data_parallel_size=args.data_parallel_size or 1,
        enable_prefix_caching=args.enable_prefix_caching is not False,
        enable_chunked_prefill=args.enable_chunked_prefill is not False,
        max_model_len=args.max_model_len or needed_len,
    )


def default_space(profile: Profile, *, graph_flag: bool, reuse: bool, needed_len: int) -> Space:
    """The space around a profile's own settings.

    Args:
        profile: the deployment to tune.
        graph_flag: the engine release has VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS.
        reuse: the workload shares prefixes (sessions, a trace): prefix caching on and off.
        needed_len: tokens the workload's longest request needs (a shorter max_model_len
            is offered when it allows one).
    """
    args = profile.serve_args
    mns = args.max_num_seqs or 256
    mbt = args.max_num_batched_tokens or 8192
    seqs = sorted({max(1, mns // 4), max(1, mns // 2), mns, mns * 2})
    batched = sorted({max(mbt // 2, 1), mbt, mbt * 2})
    spec: list[Speculation] = [Speculation()]
    if profile.speculative is not None:
        k = profile.speculative.config.num_speculative_tokens
        spec += [Speculation(n) for n in range(1, k + 1)]
    gmu = sorted({0.9, 0.95, args.gpu_memory_utilization or 0.9})
    flags: tuple[bool | None, ...] = (True, False) if graph_flag else (None,)
    gpus = profile.hardware.gpus_per_node * profile.hardware.nodes
    pp = args.pipeline_parallel_size or 1
    parallel = tuple(
        (tp, gpus // pp // tp) for tp in range(1, gpus // pp + 1) if (gpus // pp) % tp == 0
    )
    caching = (True, False) if reuse else (args.enable_prefix_caching is not False,)
    chunked_now = args.enable_chunked_prefill is not False
    chunked = (chunked_now, not chunked_now)
    length = args.max_model_len or needed_len
    lengths = {length}
    shorter = 1 << max(needed_len - 1, 1).bit_length()
    if shorter < length:
        lengths.add(shorter)
    return Space(
        tuple(seqs),
        tuple(batched),
        tuple(spec),
        tuple(gmu),
        flags,
        parallel,
        caching,
        chunked,
        tuple(sorted(lengths, reverse=True)),
    )


class SpaceFile(BaseModel):
    """A space file: each key replaces one dimension of the default space (docs/tune.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: list[int] | None = Field(default=None, description="values to try")
    max_num_batched_tokens: list[int] | None = None
    speculative: list[Any] | None = Field(
        default=None,
        description="off (or false), K (K drafts at every batch size), 'K<=B' (K drafts up to "
        "batch B, none above), or a schedule [[first, last, K], ...]",
    )
    gpu_memory_utilization: list[float] | None = None
    estimate_cudagraphs: list[bool] | None = None
    parallel: list[str] | None = Field(
        default=None, description="tensor x data parallel splits, e.g. ['8x1', '4x2']"
    )
    enable_prefix_caching: list[bool] | None = None
    enable_chunked_prefill: list[bool] | None = None
    max_model_len: list[int] | None = None


def read_space(data: object, where: str, base: Space, profile: Profile) -> Space:
    """The space a parsed space file describes, the rest from `base`.

    Raises:
        ConfigError: unknown keys, wrong types, empty lists or values the profile cannot
            take, naming the file and the key.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where}: a space file is a mapping of dimensions to lists",
            fix="write e.g. max_num_seqs: [32, 64, 128]",
        )
    try:
        file = SpaceFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        raise ConfigError(
            f"{where}: {key}: {error['msg']}",
            fix="see docs/tune.md for the dimensions and their values",
        ) from None
    for name in SpaceFile.model_fields:
        values = getattr(file, name)
        if values is not None and not values:
            raise ConfigError(
                f"{where}: {name} is an empty list, so the space has no candidate",
                fix=f"give {name} at least one value, or leave it out for the default",
            )
    k_max = profile.speculative.config.num_speculative_tokens if profile.speculative else 0
    return Space(
        _positive_ints(file.max_num_seqs, "max_num_seqs", where) or base.max_num_seqs,
        _positive_ints(file.max_num_batched_tokens, "max_num_batched_tokens", where)
        or base.max_num_batched_tokens,
        tuple(_speculation(v, where, k_max) for v in file.speculative)
        if file.speculative
        else base.speculation,
        tuple(_fraction(v, where) for v in file.gpu_memory_utilization)
        if file.gpu_memory_utilization
        else base.gpu_memory_utilization,
        tuple(file.estimate_cudagraphs) if file.estimate_cudagraphs else base.estimate_cudagraphs,
        tuple(_split(v, where) for v in file.parallel) if file.parallel else base.parallel,
        tuple(file.enable_prefix_caching)
        if file.enable_prefix_caching
        else base.enable_prefix_caching,
        tuple(file.enable_chunked_prefill)
        if file.enable_chunked_prefill
        else base.enable_chunked_prefill,
        _positive_ints(file.max_model_len, "max_model_len", where) or base.max_model_len,
    )


def _positive_ints(values: list[int] | None, name: str, where: str) -> tuple[int, ...]:
    if values is None:
        return ()
    bad = [v for v in values if v <= 0]
    if bad:
        raise ConfigError(f"{where}: {name} {bad[0]} is not positive", fix=f"give {name} >= 1")
    return tuple(sorted(set(values)))


def _fraction(value: float, where: str) -> float:
    if not 0 < value <= 1:
        raise ConfigError(
            f"{where}: gpu_memory_utilization {value} is outside (0, 1]",
            fix="give fractions of each GPU's memory, e.g. 0.9",
        )
    return value


def _split(text: str, where: str) -> tuple[int, int]:
    tp, sep, dp = str(text).partition("x")
    if not sep or not tp.isdigit() or not dp.isdigit() or int(tp) < 1 or int(dp) < 1:
        raise ConfigError(
            f"{where}: parallel {text!r} is not TPxDP", fix="write e.g. '8x1' or '4x2'"
        )
    return int(tp), int(dp)


def _speculation(value: object, where: str, k_max: int) -> Speculation:
    """One speculative value of a space file."""
    if value is False or value == "off" or value == 0:
        return Speculation()
    if not k_max:
        raise ConfigError(
            f"{where}: speculative {value!r} needs a draft, but the profile has no speculative "
            "section",
            fix="add speculative: to the profile (its draft model), or keep speculative: [off]",
        )
    if isinstance(value, int) and not isinstance(value, bool):
        return Speculation(_k(value, where, k_max))
    if isinstance(value, str) and "<=" in value:
        k_text, _, batch = value.partition("<=")
        if k_text.strip().isdigit() and batch.strip().isdigit() and int(batch) >= 1:
            return on_up_to(_k(int(k_text), where, k_max), int(batch), int(batch) + 1)
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(e, list) and len(e) == 3 and all(isinstance(x, int) for x in e)
            for e in value
        )
    ):
        schedule = tuple((int(a), int(b), int(k)) for a, b, k in value)
        return Speculation(max(_k(max(k for *_, k in schedule), where, k_max), 0), schedule)
    raise ConfigError(
        f"{where}: speculative value {value!r} is not off, K, 'K<=B' or [[first, last, K], ...]",
        fix="see docs/tune.md",
    )


def _k(k: int, where: str, k_max: int) -> int:
    if not 0 < k <= k_max:
        raise ConfigError(
            f"{where}: {k} draft tokens is outside 1..{k_max} (the profile's "
            "num_speculative_tokens, which sizes the draft's KV cache)",
            fix=f"use 1 to {k_max}",
        )
    return k


# ---------------------------------------------------------------------------------------------
# Candidates as profiles.


def overrides(profile: Profile, settings: Settings) -> dict[str, Any]:
    """What a profile extending `profile` must set to be this candidate (changed keys only)."""
    args = profile.serve_args
    serve: dict[str, Any] = {}
    wanted: dict[str, Any] = {
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "data_parallel_size": settings.data_parallel_size
        if settings.data_parallel_size > 1 or args.data_parallel_size
        else None,
        "max_model_len": settings.max_model_len,
    }
    for key, value in wanted.items():
        if getattr(args, key) != value:
            serve[key] = value
    # vLLM's defaults (on) when the profile says nothing
    for key in ("enable_prefix_caching", "enable_chunked_prefill"):
        value = getattr(settings, key)
        if (getattr(args, key) is not False) != value:
            serve[key] = value
    out: dict[str, Any] = {}
    if serve:
        out["serve_args"] = serve
    flag = settings.estimate_cudagraphs
    if flag is not None:
        text = "1" if flag else "0"
        if profile.env.get(ESTIMATE_CUDAGRAPHS_ENV) != text:
            out["env"] = {ESTIMATE_CUDAGRAPHS_ENV: text}
    spec = settings.speculation
    current = profile.speculative.config if profile.speculative else None
    if not spec.on:
        if current is not None:
            out["speculative"] = None
    else:
        if current is None:
            raise UsageError(
                f"candidate {settings.label()} speculates but {profile.name} has no draft",
                fix="add speculative: to the profile",
            )
        config: dict[str, Any] = {}
        if current.num_speculative_tokens != spec.k:
            config["num_speculative_tokens"] = spec.k
        schedule = [list(e) for e in spec.schedule] if spec.schedule else None
        now = [list(e) for e in current.num_speculative_tokens_per_batch_size or []] or None
        if schedule != now:
            config["num_speculative_tokens_per_batch_size"] = schedule
        if config:
            out["speculative"] = {"config": config}
    return out


def variant(profile: Profile, settings: Settings, *, name: str | None = None) -> Profile:
    """The candidate as a validated profile.

    Raises:
        ConfigError: the profile schema refuses the combination (the message says why).
    """
    data = profile.model_dump(mode="json", by_alias=True, exclude_none=True)
    data = deep_merge(data, overrides(profile, settings))
    data["name"] = name or f"{profile.name}-{settings.ident()}"
    if data.get("speculative") is None:
        data.pop("speculative", None)
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise ConfigError(
            f"{settings.label()}: {error['msg']}", fix="leave this combination out of the space"
        ) from None
