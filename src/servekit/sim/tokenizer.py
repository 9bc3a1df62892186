"""The live simulator's tokenizer (core): deterministic token pieces, ids and vocabulary.

The tokenizer splits text into pieces (`\\w+` runs and single punctuation marks, each with
the whitespace before it attached) and names each piece by a stable BLAKE2 hash, so token
counts and ids are the same in every process. Generated text (`sim.textgen`) uses one piece
per token from `LEXICON`, so re-tokenizing an answer gives back exactly the token count the
engine produced, and `detokenize` knows every id it generates (`VOCABULARY`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence

from servekit.errors import SimulationError

_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")
ID_SPACE = 1 << 31

_WORDS = re.findall(
    r"\w+",
    "the model serves requests across eight devices while each step schedules work for the "
    "batch and streams tokens back to every client that waits on an open connection memory "
    "budget holds cache blocks for context so longer prompts need more blocks and fewer "
    "sequences fit at once speculative drafts propose several tokens which the target verifies "
    "in one pass accepted tokens arrive together in a single chunk latency grows with load "
    "throughput rises until the queue fills we measure first token time and inter token gaps "
    "then compare runs to decide which configuration to keep a careful plan checks weights "
    "activations graphs and kernels before launch this answer explains why results differ "
    "between quiet and busy periods because shared experts route tokens through different "
    "paths data moves over links with high bandwidth yet small messages still pay fixed costs "
    "good tests repeat each point several times report percentiles and keep raw records so "
    "later analysis can recompute anything simple tools help teams move faster with fewer "
    "surprises weather city river mountain garden library window morning evening quiet bright "
    "green blue red small large quick slow early late first second third final local remote",
)
LEXICON: tuple[str, ...] = tuple(dict.fromkeys(_WORDS))
CITIES = ("Paris", "Berlin", "Tokyo", "Lima", "Nairobi", "Oslo", "Toronto", "Sydney")


def split_pieces(text: str) -> list[str]:
    """Split text into token pieces; joining them gives the text back exactly."""
    return _PIECE.findall(text)


def iter_pieces(text: str) -> Iterator[str]:
    """Yield the token pieces of a text one by one (`split_pieces`, lazily)."""
    return (match.group() for match in _PIECE.finditer(text))


def stable_seed(*parts: str) -> int:
    """Return a 64-bit seed that is the same for the same strings in every process."""
    digest = hashlib.blake2b("\x1f".join(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def token_id(piece: str) -> int:
    """Return the stable id of one piece."""
    digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % ID_SPACE


def count_tokens(text: str) -> int:
    """Return how many tokens the simulator's tokenizer makes of a text."""
    return len(split_pieces(text))


def tokenize(text: str) -> list[int]:
    """Return the token ids of a text."""
    return [token_id(piece) for piece in split_pieces(text)]


def _vocabulary() -> dict[int, str]:
    pieces = [".", ",", ":", "\n", *(" " + c for c in CITIES), *CITIES]
    for word in LEXICON:
        pieces += [word, " " + word, word.capitalize(), " " + word.capitalize()]
    return {token_id(piece): piece for piece in pieces}


VOCABULARY: Mapping[int, str] = _vocabulary()


def detokenize(ids: Sequence[int], known: Mapping[int, str] | None = None) -> str:
    """Return the text of token ids the simulator generates or has seen.

    Args:
        ids: token ids.
        known: extra id -> piece entries (pieces of texts the caller tokenized before).

    Raises:
        SimulationError: an id is neither generated vocabulary nor in `known`.
    """
    out = []
    for ident in ids:
        piece = VOCABULARY.get(ident)
        if piece is None and known is not None:
            piece = known.get(ident)
        if piece is None:
            raise SimulationError(
                f"token id {ident} is not in the simulator's vocabulary",
                fix="detokenize ids returned by this server's /tokenize or its answers",
            )
        out.append(piece)
    return "".join(out)
