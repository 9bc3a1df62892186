"""Timestamped trace replay (shell): a trace's requests as prompts, and the replay's checks.

A request with `hash_ids` gets a prompt made of one text block per id, in order: equal ids
give exactly equal text, every full block counts exactly `block_tokens` tokens as the
server tokenizes it, and the last block is cut so the whole prompt counts the request's
`input_len` (for chat, the chat template's tokens included, as bench counts every prompt:
they come out of the last block, so requests sharing k leading ids share the template's
opening tokens and exactly k blocks). A cut block is the start of the full one. Block text
depends on the id and `BenchSpec.seed`: a replay repeated on one server finds its blocks
cached unless the seed changes.
Blocks are space-separated pseudo-words drawn from a small vocabulary whose words' token
counts are measured once with the server's `/tokenize` (through `bench.sizing.Sizer`, so the
local `--tokenizer` or the one-word-per-token approximation stand in the same way). Every
word is space-prefixed, and byte-level BPE and SentencePiece tokenizers split before such a
word, so no token straddles a word or block join and a prompt's count is the sum of its
words' counts. That sum is checked: each whole prompt is counted once, a prompt that is off
has its tail re-cut, and one that still is off is named in the plan's problems. A block's
text is composed once per id and kept, so a trace of thousands of requests costs about one
`/tokenize` call per request. A request without `hash_ids` gets a distinct synthetic prompt
(`bench.sizing.sized_prompts`), drawn from its own stream of the seed (`plain_rng`), not the
run's: the warmup prompts come from that one, and the trace's first prompt must share no
prefix with them.

After the point, `prompt_length_warnings` compares the server's usage with the trace (the
schedule lag against `BenchSpec.max_schedule_lag_ms` is `analyze.traffic.schedule_block`).
"""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servekit.bench.sizing import APPROXIMATE, Sizer, sized_prompts
from servekit.records import RequestRecord
from servekit.workload.traces import MOONCAKE_BLOCK_TOKENS, Trace, TraceRequest

if TYPE_CHECKING:
    from servekit.bench.spec import BenchSpec
    from servekit.client.endpoint import Endpoint

VOCABULARY_WORDS = 90  # candidate words whose token counts are measured
MAX_WORD_TOKENS = 4  # longer words are dropped from the vocabulary
RECUTS = 4  # tries to re-cut a prompt's tail when its whole count is off
COUNT_CONCURRENCY = 16  # /tokenize calls in flight while checking prompts
# Short pseudo-words, most of them one or two tokens in BPE and SentencePiece vocabularies.
_SYLLABLES = (
    "ba", "ce", "di", "fo", "gu", "ha", "je", "ki", "lo", "mu", "na", "pe", "qi", "ro", "su",
    "te", "vi", "wo", "xu", "ya", "zo", "bi", "da", "fe",
)  # fmt: skip
_ANCHOR = "ka"


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Words and their token counts as the server counts them mid-text (after a space);
    `overhead` is what a one-word prompt counts beyond its word (template, BOS)."""

    words: tuple[str, ...]
    counts: tuple[int, ...]
    overhead: int

    def fitting(self, room: int) -> list[int]:
        """Indices of the words that fit in `room` tokens."""
        return [i for i, c in enumerate(self.counts) if c <= room]


@dataclass(frozen=True, slots=True)
class TracePrompts:
    """The prompts of a trace's requests, how they were counted, and what is not exact."""

    prompts: list[str]
    method: str
    problems: list[str]


async def measure_vocabulary(sizer: Sizer, seed: int) -> Vocabulary:
    """Count the candidate words: single letters (one token in most vocabularies, so any
    length can be composed), syllables and seeded two-syllable words, each as the server
    counts it after another word; words longer than `MAX_WORD_TOKENS` are dropped."""
    rng = random.Random(f"servekit-replay-vocabulary:{seed}")
    candidates = list(dict.fromkeys([*string.ascii_lowercase, *_SYLLABLES, *(
        rng.choice(_SYLLABLES) + rng.choice(_SYLLABLES) for _ in range(VOCABULARY_WORDS)
    )]))[:VOCABULARY_WORDS]  # fmt: skip
    anchor = await sizer.count(f" {_ANCHOR}")
    pair = await sizer.count(f" {_ANCHOR} {_ANCHOR}")
    if anchor is None or pair is None:  # nothing counts: one word per token
        return Vocabulary(tuple(candidates), (1,) * len(candidates), 0)
    counted = await asyncio.gather(*(sizer.count(f" {_ANCHOR} {w}") for w in candidates))
    kept = [
        (w, c - anchor)
        for w, c in zip(candidates, counted, strict=True)
        if c is not None and 1 <= c - anchor <= MAX_WORD_TOKENS
    ]
    if not kept:
        kept = [(_ANCHOR, max(pair - anchor, 1))]
    words, counts = zip(*kept, strict=True)
    return Vocabulary(tuple(words), tuple(counts), anchor - (pair - anchor))


def plain_rng(seed: int) -> random.Random:
    """The RNG of the prompts of a trace's requests without hash ids."""
    return random.Random(f"servekit-replay-plain:{seed}")


def compose(vocab: Vocabulary, tokens: int, rng: random.Random) -> list[int]:
    """Word indices whose counts sum to `tokens` (or just under, when no word fits the
    remainder), drawn by `rng`."""
    out: list[int] = []
    total = 0
    while total < tokens:
        word = rng.randrange(len(vocab.words))
        if total + vocab.counts[word] > tokens:
            fitting = vocab.fitting(tokens - total)
            if not fitting:
                break
            word = rng.choice(fitting)
        out.append(word)
        total += vocab.counts[word]
    return out


class BlockTexts:
    """Each hash id's block as word indices, composed once from a seed of the id."""

    def __init__(self, vocab: Vocabulary, block_tokens: int, seed: int) -> None:
        self.vocab = vocab
        self.block_tokens = block_tokens
        self.seed = seed
        self._blocks: dict[int, list[int]] = {}

    def block(self, ident: int) -> list[int]:
        """The id's full block (exactly `block_tokens` tokens when the vocabulary allows)."""
        if (words := self._blocks.get(ident)) is None:
            rng = random.Random(f"servekit-replay-block:{self.seed}:{ident}")
            words = self._blocks[ident] = compose(self.vocab, self.block_tokens, rng)
        return words

    def prompt_words(self, ids: Sequence[int], content: int, filler: random.Random) -> list[int]:
        """Word indices of a prompt of `content` tokens: full blocks of `ids`, the last one
        cut at the remainder, and request-distinct `filler` words past the ids' blocks (a
        trace whose ids cover less than the prompt, or a tail re-cut longer)."""
        out: list[int] = []
        counts = self.vocab.counts
        total = 0
        for ident in ids:
            if total >= content:
                break
            for word in self.block(ident):
                if total + counts[word] > content:
                    break
                out.append(word)
                total += counts[word]
            else:
                continue
            break  # the block was cut: the rest is filler
        out += compose(self.vocab, content - total, filler)
        return out

    def text(self, words: list[int]) -> str:
        """The words as prompt text, each after a space."""
        vocab = self.vocab.words
        return "".join(" " + vocab[w] for w in words)


async def trace_prompts(
    endpoint: Endpoint, spec: BenchSpec, requests: Sequence[TraceRequest], block_tokens: int
) -> TracePrompts:
    """The prompt of each trace request, sized to its `input_len` (see the module doc).

    Args:
        endpoint: the server whose `/tokenize` counts (the spec's fallbacks otherwise).
        spec: the run (api, model, chat template kwargs, tools, seed, local tokenizer).
        requests: the requests to plan, in send order.
        block_tokens: tokens per hash id.
    """
    prompts: list[str] = [""] * len(requests)
    plain = [i for i, r in enumerate(requests) if not r.hash_ids]
    method = APPROXIMATE
    if plain:
        sized, method = await sized_prompts(
            endpoint, spec, [requests[i].input_len for i in plain], plain_rng(spec.seed)
        )
        for index, prompt in zip(plain, sized, strict=True):
            prompts[index] = prompt
    hashed = [i for i, r in enumerate(requests) if r.hash_ids]
    sizer = Sizer(endpoint, spec)
    if not hashed:
        return TracePrompts(prompts, method, [])
    vocab = await measure_vocabulary(sizer, spec.seed)
    blocks = BlockTexts(vocab, block_tokens, spec.seed)
    slots = asyncio.Semaphore(COUNT_CONCURRENCY)
    problems: list[tuple[TraceRequest, int | None]] = []

    async def fit(index: int, request: TraceRequest) -> None:
        ids = request.hash_ids or ()
        content = request.input_len - vocab.overhead
        counted: int | None = None
        for _ in range(RECUTS + 1):
            filler = random.Random(f"servekit-replay-filler:{spec.seed}:{index}")
            prompts[index] = blocks.text(blocks.prompt_words(ids, max(content, 1), filler))
            async with slots:
                counted = await sizer.count(prompts[index])
            if counted is None or counted == request.input_len or content < 1:
                break
            content -= counted - request.input_len
        if counted is not None and counted != request.input_len:
            problems.append((request, counted))

    await asyncio.gather(*(fit(i, requests[i]) for i in hashed))
    problems.sort(key=lambda problem: problem[0].line)
    return TracePrompts(
        prompts, sizer.method, [_problem(r, c, vocab.overhead) for r, c in problems]
    )


def _problem(request: TraceRequest, counted: int | None, overhead: int) -> str:
    why = (
        f"the prompt's template and special tokens alone count {overhead}"
        if request.input_len <= overhead
        else "the tokenizer merges tokens across the words' spaces"
    )
    return (
        f"trace line {request.line}: its prompt counts {counted} tokens, not input_len "
        f"{request.input_len} ({why})"
    )


def prompt_length_warnings(
    records: Sequence[RequestRecord], requests: Sequence[TraceRequest]
) -> list[str]:
    """Records whose usage `prompt_tokens` differ from their trace request's `input_len`
    (records are `{label}-{index}`; servers that report no usage are not checked)."""
    off = []
    for record in records:
        index = int(record.id.rpartition("-")[2])
        request = requests[index] if 0 <= index < len(requests) else None
        if (
            request is not None
            and record.prompt_tokens
            and (record.prompt_tokens != request.input_len)
        ):
            off.append((request, record.prompt_tokens))
    if not off:
        return []
    request, got = off[0]
    return [
        f"{len(off)} request(s) reached the server with another prompt length than the trace's "
        f"(e.g. trace line {request.line}: {got} tokens, not {request.input_len})"
    ]


def block_tokens_of(trace: Trace) -> int:
    """Tokens per hash id of a trace (Mooncake's 512 when the trace does not say)."""
    return trace.block_tokens or MOONCAKE_BLOCK_TOKENS
