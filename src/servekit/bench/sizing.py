"""Size synthetic prompts to an exact token count with the server's tokenizer (shell).

With `/tokenize` the word count of each prompt is adjusted until the server counts exactly
`input_len` tokens (for chat, including the chat template's tokens). Without it, prompts
use a stated approximation of one word per token and the summary says so.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import aiohttp

from servekit.workload.synthetic import words

if TYPE_CHECKING:
    from servekit.bench.runner import BenchSpec

MAX_ADJUST = 6


async def _count(session: aiohttp.ClientSession, spec: BenchSpec, prompt: str) -> int | None:
    body: dict[str, Any] = {"model": spec.model}
    if spec.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    try:
        async with session.post(f"{spec.base_url}/tokenize", json=body) as r:
            if r.status != 200:
                return None
            doc = await r.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    count = doc.get("count") if isinstance(doc, dict) else None
    return count if isinstance(count, int) else None


async def sized_prompts(
    session: aiohttp.ClientSession, spec: BenchSpec, lengths: list[int], rng: random.Random
) -> list[str]:
    """Return one distinct prompt per target length (exact when /tokenize exists).

    With `spec.shared_prefix`, every prompt starts with the same text of about that many
    tokens (a prefix-cache workload); the distinct rest makes up the target length.
    """
    prefix = ""
    if spec.shared_prefix:
        prefix = words(spec.shared_prefix, random.Random(spec.seed ^ 0x5EED)) + " "
    out: list[str] = []
    words_per_token = 1.0
    for target in lengths:
        state = rng.getstate()
        rest = max(1, round((target - spec.shared_prefix) * words_per_token))
        prompt = prefix + words(rest, rng)
        for _ in range(MAX_ADJUST):
            counted = await _count(session, spec, prompt)
            if counted is None or counted == target:
                break
            rest = max(1, rest + round((target - counted) * words_per_token))
            rng.setstate(state)
            prompt = prefix + words(rest, rng)
        words_per_token = rest / max(target - spec.shared_prefix, 1)
        out.append(prompt)
    return out
