"""Tests of prompt datasets and length distributions."""

from __future__ import annotations

import json
import random

import pytest

from servekit.errors import UsageError
from servekit.workload.datasets import (
    LengthSpec,
    PromptItem,
    load_dataset_text,
    parse_length,
)
from servekit.workload.synthetic import constant_arrivals, gamma_arrivals, poisson_arrivals


def test_jsonl_prompts_and_messages() -> None:
    """JSONL lines give text prompts or chat messages, with optional output lengths."""
    text = '{"prompt": "hi", "output_len": 5}\n\n{"messages": [{"role": "user", "content": "x"}]}\n'
    items = load_dataset_text(text, "d.jsonl")
    assert items[0] == PromptItem(prompt="hi", output_len=5)
    assert items[1].messages == ({"role": "user", "content": "x"},)


def test_jsonl_errors_name_the_line() -> None:
    """A bad line is a usage error with file and line number."""
    with pytest.raises(UsageError, match=r"d\.jsonl:2: not JSON"):
        load_dataset_text('{"prompt": "a"}\n{oops\n', "d.jsonl")
    with pytest.raises(UsageError, match=r"d.jsonl:1: needs a non-empty 'prompt'"):
        load_dataset_text('{"text": "a"}\n', "d.jsonl")


def test_sharegpt_pairs() -> None:
    """ShareGPT conversations give the first human turn and the answer's word count."""
    doc = [
        {"conversations": [{"from": "human", "value": "q?"}, {"from": "gpt", "value": "a b c"}]},
        {"conversations": [{"from": "gpt", "value": "orphan"}]},
    ]
    assert load_dataset_text(json.dumps(doc), "s.json") == [PromptItem(prompt="q?", output_len=3)]


@pytest.mark.parametrize(
    ("text", "spec"),
    [("128", LengthSpec(128)), ("64:uniform", LengthSpec(64, "uniform")),
     ("100:normal:10", LengthSpec(100, "normal", 10.0))],
)  # fmt: skip
def test_length_specs(text: str, spec: LengthSpec) -> None:
    """N, N:uniform and N:normal:SD parse; draws stay positive and inside uniform bounds."""
    assert parse_length(text, "--x") == spec
    rng = random.Random(0)
    draws = [spec.draw(rng) for _ in range(500)]
    assert min(draws) >= 1
    if spec.kind == "uniform":
        assert min(draws) >= 32
        assert max(draws) <= 96


@pytest.mark.parametrize("text", ["0", "abc", "10:zipf", "10:normal"])
def test_bad_length_specs(text: str) -> None:
    """Anything else is a usage error naming the flag."""
    with pytest.raises(UsageError, match="--input-len"):
        parse_length(text, "--input-len")


def test_arrival_processes_have_the_asked_rate() -> None:
    """Poisson and gamma arrivals average the rate; constant arrivals are evenly spaced."""
    rng = random.Random(1)
    assert poisson_arrivals(10.0, 5000, rng)[-1] == pytest.approx(500, rel=0.05)
    assert gamma_arrivals(10.0, 0.5, 5000, rng)[-1] == pytest.approx(500, rel=0.08)
    assert constant_arrivals(4.0, 4) == [0.25, 0.5, 0.75, 1.0]
