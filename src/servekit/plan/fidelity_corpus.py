"""The real-startup corpus as values (core): its two JSON-lines files, and the config join.

`startups.jsonl` holds one real server start per line, `configs.jsonl` the models'
`config.json` facts (benchmarks/corpus/real-startups/README.md). Records are validated at
this edge; `join_config` finds the config a startup is planned from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from servekit.errors import ConfigError


class _Record(BaseModel):
    # Corpus lines carry provenance fields that vary by source; only these are read.
    model_config = ConfigDict(extra="ignore", frozen=True)


class StartupRecord(_Record):
    """One real server start as `startups.jsonl` holds it; `None` means unknown."""

    id: str
    model: str
    vllm_version: str | None = None
    quantization: str | None = None
    gpu: str | None = None
    gpu_mem_gib_reported: float | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: bool | None = None
    dcp: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    enforce_eager: bool | None = None
    speculative: str | dict[str, Any] | None = None
    env: dict[str, Any] = {}
    figures: dict[str, float | None] = {}
    log_lines: list[str] = []
    notes: str = ""


class RelatedConfig(_Record):
    """A stand-in config (a base model's) where the checkpoint's own is missing."""

    model: str
    config: dict[str, Any]


class ConfigRecord(_Record):
    """One model's `config.json` facts as `configs.jsonl` holds them."""

    model: str
    corpus_model_strings: list[str] = []
    config: dict[str, Any] | None = None
    related_config: RelatedConfig | None = None


@dataclass(frozen=True, slots=True)
class Corpus:
    """The startups and the configs of one corpus directory."""

    startups: tuple[StartupRecord, ...]
    configs: tuple[ConfigRecord, ...]


def parse_corpus(startups_text: str, configs_text: str) -> Corpus:
    """Parse the two JSON-lines texts of a corpus (blank lines are skipped).

    Raises:
        ConfigError: a line is not JSON or lacks a field the comparison needs.
    """
    return Corpus(
        startups=tuple(_parse_lines(startups_text, StartupRecord, "startups.jsonl")),
        configs=tuple(_parse_lines(configs_text, ConfigRecord, "configs.jsonl")),
    )


_R = TypeVar("_R", bound=_Record)


def _parse_lines(text: str, model: type[_R], what: str) -> list[_R]:
    out: list[_R] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(model.model_validate(json.loads(line)))
        except (ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0]
            raise ConfigError(
                f"{what} line {number} is not a corpus record: {first}",
                fix=f"fix line {number} (see benchmarks/corpus/real-startups/README.md)",
            ) from None
    return out


@dataclass(frozen=True, slots=True)
class JoinedConfig:
    """The config a startup is planned from, and whether it is a stand-in."""

    config: Mapping[str, Any]
    record_model: str
    related_model: str | None = None

    @property
    def note(self) -> str | None:
        """Says so when a related model's config stands in for the checkpoint's own."""
        if self.related_model is None:
            return None
        return (
            f"config: {self.record_model}'s own config.json is not in the corpus; "
            f"planned from the related config of {self.related_model}"
        )


def join_config(entry: StartupRecord, configs: Sequence[ConfigRecord]) -> JoinedConfig | str:
    """Return the config for `entry` (by its model string), or why there is none."""
    for record in configs:
        if entry.model != record.model and entry.model not in record.corpus_model_strings:
            continue
        if record.config:
            return JoinedConfig(record.config, record.model)
        if record.related_config is not None and record.related_config.config:
            return JoinedConfig(
                record.related_config.config, record.model, record.related_config.model
            )
        return f"config: configs.jsonl has no config.json facts for {record.model}"
    return f"config: no configs.jsonl record names the model {entry.model!r}"
