"""Deterministic answers for the live simulator (core): planned answers and their text.

An answer is planned before the engine runs it (tokens of reasoning, content or tool-call
arguments, the finish reason and the seeds of its text); the text itself is generated
lazily, chunk by chunk as the engine delivers tokens, so a long answer never sits in memory
whole. Greedy answers (temperature 0) depend only on the prompt text (and the requested
length), never on concurrency or timing; sampled answers also mix in the request's own
seed. Text is one piece of the simulator's tokenizer (`sim.tokenizer`) per token; the
prompt and the tool called come from `sim.chat`.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from servekit.errors import SimulationError
from servekit.sim._schema_args import arguments_for
from servekit.sim.chat import ToolSpec
from servekit.sim.tokenizer import CITIES, LEXICON, split_pieces, stable_seed, token_id

Kind = Literal["reasoning", "content", "tool"]

# MiniMax-M3's thinking and tool-call namespace markers: they must never reach clients.
MARKERS = ("<mm:think>", "</mm:think>", "]<]minimax[>[")
# What a corrupted request streams per token: NUL bytes and replacement characters,
# the "silent garbage" face of the top-k layout bug (docs/engine-facts.md section 1).
GARBAGE_PIECE = "\x00\ufffd\ufffd"
# Share of max_tokens spent thinking when thinking is enabled.
REASONING_SHARE = 0.25


def iter_generated(seed: int) -> Iterator[str]:
    """Yield pieces (one token each) of plausible English sentences, without end.

    Sentences are drawn one at a time, so taking n pieces costs O(n) time and O(sentence)
    memory; the first n pieces are the same however they are taken.
    """
    rng = random.Random(seed)
    first = True
    while True:
        words = [rng.choice(LEXICON) for _ in range(rng.randint(5, 14))]
        yield words[0].capitalize() if first else " " + words[0].capitalize()
        first = False
        for index, word in enumerate(words[1:], start=1):
            yield " " + word
            if index < len(words) - 1 and rng.random() < 0.07:
                yield ","
        yield "."


def generate_pieces(seed: int, n: int) -> list[str]:
    """Return the first n pieces of `iter_generated(seed)`."""
    return list(itertools.islice(iter_generated(seed), n))


@dataclass(frozen=True, slots=True)
class AnswerRequest:
    """What the answer depends on.

    Attributes:
        prompt: the rendered prompt text (greedy answers depend on it alone).
        max_tokens: requested output tokens; None lets the answer end by itself.
        context_left: max_model_len minus the prompt tokens.
        default_tokens: answer length when max_tokens is None (capped by context_left).
        min_tokens: shortest answer when max_tokens is None.
        temperature: 0 for greedy.
        seed: the request's own seed, mixed in when temperature > 0.
        thinking: whether the answer starts with reasoning.
        tool: the tool to call, or None for text.
        ignore_eos: run to the length limit even without max_tokens.
    """

    prompt: str
    max_tokens: int | None
    context_left: int
    default_tokens: int = 256
    min_tokens: int = 0
    temperature: float = 0.0
    seed: int = 0
    thinking: bool = False
    tool: ToolSpec | None = None
    ignore_eos: bool = False


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of tokens of one kind inside a streamed chunk."""

    kind: Kind
    text: str
    tokens: int
    first: bool  # the first tokens of this kind in the answer
    ids: tuple[int, ...] = ()  # the tokens' ids, when the reader was asked for them


@dataclass(frozen=True, slots=True)
class TokenText:
    """How generated tokens decode, as a real tokenizer's do (`sim serve`'s options).

    Attributes:
        empty_share: share of reasoning and content tokens that decode to no text at all,
            as special tokens do (a real detokenizer skips them).
        split_share: share of reasoning and content tokens that are the first half of a
            character spelled by two tokens (a byte-level vocabulary splits CJK characters
            and emoji): the token streams as empty text and the character arrives with the
            next token.
    """

    empty_share: float = 0.0
    split_share: float = 0.0

    def __post_init__(self) -> None:
        for name in ("empty_share", "split_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise SimulationError(
                    f"{name} {value} is not a share between 0 and 1", fix="use e.g. 0.05"
                )
        if self.empty_share + self.split_share > 1.0:
            raise SimulationError(
                f"empty_share {self.empty_share} + split_share {self.split_share} is over 1",
                fix="keep the two shares' sum at most 1",
            )

    @property
    def plain(self) -> bool:
        """True when every token decodes to its own text."""
        return self.empty_share == 0.0 and self.split_share == 0.0


PLAIN_TEXT = TokenText()
SPECIAL_TOKEN_ID = token_id("<|special|>")
"""The id a token that decodes to nothing carries (a special token)."""
HALF_CHARACTER_ID = token_id("<|byte|>")
"""The id of the first token of a character spelled by two tokens."""
_SPLIT_CHARACTERS = "语言模型服务请求延迟吞吐缓存调度批量令牌🙂🚀"


@dataclass(frozen=True, slots=True)
class Answer:
    """A planned answer: its length per kind and how to generate its text, not the text.

    Output tokens come in order reasoning, content, tool-call arguments. Reasoning and
    content are drawn lazily from `iter_generated` with their seeds (see `AnswerReader`),
    so a plan is small whatever max_tokens is; tool arguments are short and kept whole.
    """

    reasoning_tokens: int
    content_tokens: int
    tool_name: str | None
    tool_pieces: tuple[str, ...]
    finish_reason: Literal["length", "stop", "tool_calls"]
    reasoning_seed: int = 0
    content_seed: int = 0

    @property
    def tokens(self) -> int:
        """Output tokens of the whole answer."""
        return self.reasoning_tokens + self.content_tokens + len(self.tool_pieces)

    def reader(self, text: TokenText = PLAIN_TEXT) -> AnswerReader:
        """A cursor that generates the answer's text chunk by chunk, from the start, its
        tokens decoding as `text` says."""
        return AnswerReader(self, text)


class AnswerReader:
    """Generates an answer's text in delivery order, O(chunk) work and memory per call.

    With a `TokenText` that is not plain, reasoning and content tokens are drawn to decode
    to nothing or to start a two-token character, from a generator seeded by the answer:
    the same answer gives the same text streamed or whole, however it is chunked.
    """

    def __init__(self, answer: Answer, text: TokenText = PLAIN_TEXT) -> None:
        self.answer = answer
        self.delivered = 0
        self._reasoning = iter_generated(answer.reasoning_seed)
        self._content = iter_generated(answer.content_seed)
        self._text = text
        self._shaping = random.Random(answer.reasoning_seed ^ answer.content_seed ^ 0x7E47)
        self._half: dict[Kind, str] = {}  # a character begun by this kind's last token
        self._ids: dict[str, int] = {}  # generated text reuses a small lexicon

    def _shape(self, kind: Kind, pieces: list[str]) -> tuple[list[str], list[int] | None]:
        """The pieces as they decode under `TokenText` (and the ids of the changed ones)."""
        text, draw = self._text, self._shaping.random
        empty, split = text.empty_share, text.empty_share + text.split_share
        out: list[str] = []
        ids: list[int] = []
        for piece in pieces:
            if (half := self._half.pop(kind, None)) is not None:
                out.append(half)  # the character's second token: now it decodes
                ids.append(token_id(half))
                continue
            u = draw()
            if u < empty:
                out.append("")
                ids.append(SPECIAL_TOKEN_ID)
            elif u < split:
                character = _SPLIT_CHARACTERS[int(draw() * len(_SPLIT_CHARACTERS))]
                self._half[kind] = (" " if piece.startswith(" ") else "") + character
                out.append("")
                ids.append(HALF_CHARACTER_ID)
            else:
                out.append(piece)
                ids.append(-1)  # its own piece's id
        return out, ids

    def _token_ids(self, pieces: list[str], shaped: list[int] | None) -> tuple[int, ...]:
        known = self._ids
        out = []
        for index, piece in enumerate(pieces):
            ident = shaped[index] if shaped is not None else -1
            if ident < 0:
                ident = known.get(piece, -1)
                if ident < 0:
                    ident = known[piece] = token_id(piece)
            out.append(ident)
        return tuple(out)

    def _pieces(self, kind: Kind, lo: int, hi: int) -> list[str]:
        answer = self.answer
        if kind == "tool":
            return list(answer.tool_pieces[lo:hi])
        source = self._reasoning if kind == "reasoning" else self._content
        pieces = list(itertools.islice(source, hi - lo))
        # A natural ("stop") answer ends its sentence, as plan_answer promises.
        if kind == "content" and answer.finish_reason == "stop" and hi == answer.content_tokens > 1:
            pieces[-1] = "."
        return pieces

    def take(self, count: int, *, garbage: bool = False, ids: bool = False) -> list[Segment]:
        """Generate the next `count` output tokens, split into runs of one kind.

        Args:
            count: tokens in this chunk (fewer if the answer ends first).
            garbage: replace the text by NUL bytes and U+FFFD (a corrupted request).
            ids: also give each segment its tokens' ids (`return_token_ids`).
        """
        answer = self.answer
        start, out, offset = self.delivered, [], 0
        sizes: tuple[tuple[Kind, int], ...] = (
            ("reasoning", answer.reasoning_tokens),
            ("content", answer.content_tokens),
            ("tool", len(answer.tool_pieces)),
        )
        for kind, size in sizes:
            lo = max(start, offset)
            hi = min(start + count, offset + size)
            if lo < hi:
                pieces = self._pieces(kind, lo - offset, hi - offset)
                shaped = None
                if kind != "tool" and not self._text.plain:  # arguments stay valid JSON
                    pieces, shaped = self._shape(kind, pieces)
                text = GARBAGE_PIECE * len(pieces) if garbage else "".join(pieces)
                token_ids = self._token_ids(pieces, shaped) if ids else ()
                out.append(Segment(kind, text, hi - lo, lo == offset, token_ids))
                self.delivered += hi - lo
            offset += size
        return out


def iter_answer_token_ids(answer: Answer, *, chunk: int = 256) -> Iterator[int]:
    """Yield the token ids of an answer in order, `chunk` tokens generated at a time.

    The ids are those of the pieces a client receives (the engine caches the KV of these
    tokens), so memory stays O(chunk) however long the answer is.
    """
    reader = AnswerReader(answer)
    known: dict[str, int] = {}  # generated text reuses a small lexicon: hash each piece once
    sizes: tuple[tuple[Kind, int], ...] = (
        ("reasoning", answer.reasoning_tokens),
        ("content", answer.content_tokens),
        ("tool", len(answer.tool_pieces)),
    )
    for kind, size in sizes:
        for lo in range(0, size, chunk):
            for piece in reader._pieces(kind, lo, min(lo + chunk, size)):
                ident = known.get(piece)
                if ident is None:
                    ident = known[piece] = token_id(piece)
                yield ident


def tool_call_pieces(tool: ToolSpec, seed: int) -> tuple[str, ...]:
    """The token pieces of the arguments the simulated model writes for a call to `tool`
    (JSON valid against its parameters schema), for an answer seeded by `seed`."""
    rng = random.Random(stable_seed("tool", tool.name, str(seed)))
    args = arguments_for(tool.parameters, rng, cities=CITIES)
    return tuple(split_pieces(json.dumps(args, ensure_ascii=False)))


def plan_answer(request: AnswerRequest) -> Answer:
    """Plan the answer to a request (its lengths and seeds; text comes from its reader).

    With max_tokens the answer is exactly that long (as with `ignore_eos`), except that a
    complete tool call ends it early; without max_tokens it is `default_tokens` long
    (at least min_tokens, at most the context left) and ends with "stop".

    Raises:
        SimulationError: no room is left for even one output token.
    """
    natural = request.max_tokens is None
    if request.max_tokens is not None:
        budget = request.max_tokens
    else:
        budget = min(request.context_left, max(request.default_tokens, request.min_tokens))
    if budget < 1:
        raise SimulationError(
            "the answer has no room for a single token",
            fix="shorten the prompt or raise max_model_len",
        )
    seed = stable_seed(request.prompt)
    if request.temperature > 0:
        seed = stable_seed(request.prompt, str(request.seed), repr(request.temperature))
    thinking = max(1, int(budget * REASONING_SHARE)) if request.thinking else 0
    thinking = min(thinking, budget - 1)
    reasoning_seed = stable_seed("reasoning", str(seed))
    if request.tool is not None:
        pieces = tool_call_pieces(request.tool, seed)
        room = budget - thinking
        finish: Literal["length", "stop", "tool_calls"] = "tool_calls"
        if len(pieces) > room:
            pieces, finish = pieces[:room], "length"
        return Answer(thinking, 0, request.tool.name, pieces, finish, reasoning_seed)
    finish = "stop" if natural and not request.ignore_eos else "length"
    content_seed = stable_seed("content", str(seed))
    return Answer(thinking, budget - thinking, None, (), finish, reasoning_seed, content_seed)
