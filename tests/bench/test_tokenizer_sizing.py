"""Prompt sizing with a local tokenizer.json when the server has no /tokenize."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from servekit.bench.requests import plan_requests
from servekit.bench.spec import BenchSpec
from servekit.client.aiohttp_transport import AiohttpTransport
from servekit.client.endpoint import Endpoint
from servekit.workload.synthetic import words

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).with_name("scripted_server.py")


def make_tokenizer(path: Path) -> Tokenizer:
    """A small BPE tokenizer trained on the synthetic vocabulary (real tokenizers library)."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))  # noqa: S106 - a token name, not a secret
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"])
    tok.train_from_iterator([words(2000, random.Random(1))], trainer)
    tok.save(str(path))
    return tok


def test_local_tokenizer_sizes_prompts_exactly(
    tmp_path: Path, start_script: Callable[..., Any]
) -> None:
    """Without /tokenize, --tokenizer counts locally: prompts land exactly on the target,
    cut at a token when whole pseudo-words (several BPE tokens each here) cannot."""
    tok = make_tokenizer(tmp_path / "tok.json")
    server = start_script(str(SCRIPT), str(tmp_path / "truth.jsonl"))
    for target in (57, 300, 1001):
        spec = BenchSpec(
            server.url, "scripted", "completions", target, 8, tokenizer=str(tmp_path / "tok.json")
        )

        async def go(spec: BenchSpec = spec) -> tuple[list[Any], str]:
            async with aiohttp.ClientSession() as session:
                return await plan_requests(
                    Endpoint(spec.base_url, AiohttpTransport(session)),
                    spec,
                    4,
                    random.Random(spec.input_len),
                )

        planned, method = asyncio.run(go())
        assert method == "local tokenizer.json"
        for p in planned:
            assert len(tok.encode(p.body["prompt"], add_special_tokens=False).ids) == target


def test_no_counter_is_stated(tmp_path: Path, start_script: Callable[..., Any]) -> None:
    """Without /tokenize or a tokenizer the approximation is named."""
    server = start_script(str(SCRIPT), str(tmp_path / "truth.jsonl"))
    spec = BenchSpec(server.url, "scripted", "completions", 50, 8)

    async def go() -> tuple[list[Any], str]:
        async with aiohttp.ClientSession() as session:
            return await plan_requests(
                Endpoint(spec.base_url, AiohttpTransport(session)), spec, 2, random.Random(0)
            )

    assert asyncio.run(go())[1] == "approximate (one word per token)"
