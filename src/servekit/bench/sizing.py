"""Size synthetic prompts to an exact token count (shell).

The count comes from the server's `/tokenize` (for chat, including the chat template's
tokens and any tools it renders); when the server has none, from a local `tokenizer.json`
given with `--tokenizer` (the prompt text only: the chat template's few tokens are not
counted); else prompts use a stated approximation of one word per token. The method used
is reported in the summary.
"""

from __future__ import annotations

import random
from functools import cache
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from servekit.errors import ConfigError
from servekit.workload.synthetic import words

if TYPE_CHECKING:
    from servekit.bench.spec import BenchSpec
    from servekit.client.endpoint import Endpoint

MAX_ADJUST = 12
SERVER = "server /tokenize"
LOCAL = "local tokenizer.json"
APPROXIMATE = "approximate (one word per token)"


@cache
def _load_tokenizer(path: str) -> Tokenizer:
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # the library raises plain Exception on bad files
        raise ConfigError(
            f"cannot load tokenizer {path!r}: {exc}", fix="pass a Hugging Face tokenizer.json"
        ) from None


class Sizer:
    """Counts prompt tokens, preferring the server, and remembers which method it used."""

    def __init__(self, endpoint: Endpoint, spec: BenchSpec) -> None:
        self.endpoint = endpoint
        self.spec = spec
        self.server_ok = True
        self.method = APPROXIMATE

    async def count(self, prompt: str) -> int | None:
        """Tokens of the prompt as sent, or None when no counter is available."""
        if self.server_ok:
            counted = await self._server_count(prompt)
            if counted is not None:
                self.method = SERVER
                return counted
            self.server_ok = False  # do not ask again for every prompt
        if self.spec.tokenizer:
            self.method = LOCAL
            tokenizer = _load_tokenizer(self.spec.tokenizer)
            return len(tokenizer.encode(prompt, add_special_tokens=False).ids)
        return None

    def trim(self, prompt: str, target: int) -> str | None:
        """With a local tokenizer: the prompt cut right after its `target`-th token, when
        the cut text counts exactly `target` tokens again (None otherwise)."""
        if self.method != LOCAL or not self.spec.tokenizer:
            return None
        tokenizer = _load_tokenizer(self.spec.tokenizer)
        offsets = tokenizer.encode(prompt, add_special_tokens=False).offsets
        for end_token in range(target, min(target + 3, len(offsets)) + 1):
            cut = prompt[: offsets[end_token - 1][1]]
            if len(tokenizer.encode(cut, add_special_tokens=False).ids) == target:
                return cut
        return None

    async def _server_count(self, prompt: str) -> int | None:
        spec = self.spec
        body: dict[str, Any] = {"model": spec.model}
        if spec.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            if spec.tools:  # the chat template renders the tools into the prompt
                body["tools"] = list(spec.tools)
            if spec.chat_template_kwargs is not None:
                body["chat_template_kwargs"] = spec.chat_template_kwargs
        else:
            body["prompt"] = prompt
        return await self.endpoint.tokenize(body, timeout_s=spec.timeout_s)


async def _cut(sizer: Sizer, text: str, target: int) -> str | None:
    """The prefix of `text` that counts exactly `target` tokens (a shared prefix is kept:
    the cut lands near the end), found by bisecting on characters (counts grow with the
    prefix, up to merge effects, so the neighbours are tried); the closest when none is exact."""
    low, high = 0, len(text)
    while high - low > 1:
        mid = (low + high) // 2
        count = await sizer.count(text[:mid])
        if count is None:
            return None
        if count < target:
            low = mid
        else:
            high = mid
    best: tuple[int, str] | None = None
    for end in range(max(high - 12, 1), min(high + 12, len(text) + 1)):
        candidate = text[:end]
        count = await sizer.count(candidate)
        if count == target:
            return candidate
        if count is not None and (best is None or abs(count - target) < best[0]):
            best = (abs(count - target), candidate)
    return best[1] if best is not None else None


async def sized_prompts(
    endpoint: Endpoint, spec: BenchSpec, lengths: list[int], rng: random.Random
) -> tuple[list[str], str]:
    """Return one distinct prompt per target length, and the counting method used.

    With `spec.shared_prefix`, every prompt starts with the same text of about that many
    tokens (a prefix-cache workload); the distinct rest makes up the target length.
    """
    sizer = Sizer(endpoint, spec)
    prefix = ""
    prefix_tokens = 0
    if spec.shared_prefix:
        prefix = words(spec.shared_prefix, random.Random(spec.seed ^ 0x5EED)) + " "
        prefix_tokens = await sizer.count(prefix) or spec.shared_prefix
    out: list[str] = []
    words_per_token = 1.0
    for target in lengths:
        state = rng.getstate()
        want = max(target - prefix_tokens, 1)
        rest = max(1, round(want * words_per_token))
        prompt = prefix + words(rest, rng)
        tried: set[int] = set()
        for _ in range(MAX_ADJUST):
            counted = await sizer.count(prompt)
            if counted is None or counted == target:
                break
            tried.add(rest)
            words_per_token = rest / max(counted - prefix_tokens, 1)
            step = round(want * words_per_token) - rest
            if step == 0 or rest + step in tried:  # rounding stalls: walk one word
                step = 1 if counted < target else -1
            if rest + step < 1 or rest + step in tried:
                break  # the closest length this tokenizer allows
            rest += step
            rng.setstate(state)
            prompt = prefix + words(rest, rng)
        if counted is not None and counted != target:
            # Whole words cannot land on the target: cut a longer prompt at a token (local
            # tokenizer), else at the character where the count reaches it (any counter).
            rng.setstate(state)
            longer = prefix + words(rest + abs(target - counted) + 2, rng)
            prompt = sizer.trim(longer, target) or await _cut(sizer, longer, target) or prompt
        out.append(prompt)
    return out, sizer.method
