"""The secrets of one run and their removal from text, documents and errors (core).

A `Redactor` is built once at the CLI edge from what servekit was given to authenticate
with (the API key, a URL's password and the basic-auth token made of it) and applied at
every output sink: the files a run writes (records, summary, validate.json, transcripts),
what the CLI prints and the error it reports. It redacts what came from anywhere: a server
that echoes the key back, an engine log that prints it, an error that quotes a request.

What is replaced by `[REDACTED]`:

- a secret of `PARTIAL_MIN_CHARS` (8) characters or more: every run of at least 8
  consecutive characters of it, wherever it occurs. A server that echoes only part of the
  key ("invalid key sk-proj-abc..."), or a message servekit itself cut short at its length
  bound, would otherwise print most of it: 8 characters of a random key are ~48 bits of it.
  A shorter run is left: it would match ordinary text, and a key's first characters are a
  public prefix ("sk-proj-") that every key shares anyway.
- a secret of `MIN_ANYWHERE_CHARS` (6) or 7 characters: the whole secret, wherever it occurs.
- a shorter secret: the whole secret where it stands as a word (not inside a longer run of
  letters and digits); replacing two letters everywhere would wreck every output.

Each rule also applies to the secret JSON-escaped as a server may write it, in text that was
never parsed (an error body, the start of an HTML page): any character as `\\uXXXX` (a
surrogate pair past U+FFFF), `/` as `\\/`, `"` and `\\` escaped, at any depth of escaping
(`\\\\u0073` inside JSON text that was itself put into JSON). Keys of a document whose schema
servekit defines are never rewritten.

Cost: each long secret is looked for by its aligned 4-character blocks (every run of 8 holds
one whole) with `str.__contains__`, so text without a secret costs a few C-speed scans; the
escaped forms are decoded only in text that holds an escape. benchmarks/README.md has the
figures for a 10 MB text.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

REDACTED = "[REDACTED]"
"""What stands in for a secret."""

MIN_ANYWHERE_CHARS = 6
"""Secrets at least this long are replaced wherever they occur; shorter ones only as whole
words (a 3-letter password would otherwise match inside ordinary words)."""

PARTIAL_MIN_CHARS = 8
"""Secrets at least this long lose every run of this many of their characters or more
(a partial echo); shorter ones are replaced only whole."""

_BLOCK = PARTIAL_MIN_CHARS // 2
"""Any run of PARTIAL_MIN_CHARS characters of a secret holds one whole block of the secret's
characters at a multiple of this offset (2 x 4 - 1 <= 8), so the blocks are the search keys."""

_WORD = "A-Za-z0-9"
_HEX = "[0-9a-fA-F]{4}"
D = TypeVar("D", bound="BaseModel")
T = TypeVar("T")
Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Long:
    """A secret of PARTIAL_MIN_CHARS or more, with its search blocks and where each block
    stands in it (a block may stand at several offsets)."""

    secret: str
    blocks: tuple[str, ...]
    offsets: dict[str, tuple[int, ...]]
    pattern: re.Pattern[str]


def _long(secret: str) -> _Long:
    blocks = {secret[i : i + _BLOCK] for i in range(0, len(secret) - _BLOCK + 1, _BLOCK)}
    offsets: dict[str, list[int]] = {}
    for i in range(len(secret) - _BLOCK + 1):
        if (block := secret[i : i + _BLOCK]) in blocks:
            offsets.setdefault(block, []).append(i)
    ordered = tuple(sorted(blocks))
    pattern = re.compile("|".join(re.escape(b) for b in ordered))
    return _Long(secret, ordered, {b: tuple(o) for b, o in offsets.items()}, pattern)


def _run_at(text: str, at: int, secret: str, offset: int) -> Span:
    """The widest stretch of `text` around a block found at `at` that equals consecutive
    characters of `secret`, the block standing at `offset` in it."""
    end, j = at + _BLOCK, offset + _BLOCK
    while end < len(text) and j < len(secret) and text[end] == secret[j]:
        end, j = end + 1, j + 1
    start, j = at, offset
    while start > 0 and j > 0 and text[start - 1] == secret[j - 1]:
        start, j = start - 1, j - 1
    return start, end


@dataclass(frozen=True, slots=True)
class _Decoded:
    """Text with one level of JSON escapes decoded, and where each character came from."""

    text: str
    view_at: list[int]  # where each segment starts in `text`
    source_at: list[int]  # where it starts in the text decoded
    escape_len: list[int]  # 0 for a copied segment, else its escape's length (one char)

    def source_span(self, span: Span) -> Span:
        """The span in the text decoded of a span of `text`."""
        return self._source(span[0])[0], self._source(span[1] - 1)[1]

    def _source(self, at: int) -> Span:
        i = bisect.bisect_right(self.view_at, at) - 1
        if self.escape_len[i]:
            return self.source_at[i], self.source_at[i] + self.escape_len[i]
        source = self.source_at[i] + at - self.view_at[i]
        return source, source + 1


def _escape_pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    """One JSON escape that can spell a character of `secrets`: a surrogate pair, any other
    `\\uXXXX`, `\\\\` (deeper escapes are made of it), and the one-letter escapes of the
    characters the secrets hold (`\\/` for a password with a slash); the other escapes (the
    `\\"` all over JSON put into JSON) are left as they are, which costs nothing."""
    letters = "\\" + "".join(e for c, e in _ONE_LETTER.items() if any(c in s for s in secrets))
    pair = r"u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})"
    return re.compile(rf"\\(?:{pair}|u({_HEX})|([{re.escape(letters)}]))", re.IGNORECASE)


_ONE_LETTER = {'"': '"', "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
"""The characters JSON escapes with one letter (besides the backslash), and the letter."""
_LETTERS = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
MAX_ESCAPE_DEPTH = 4
"""JSON text put into JSON up to this many times over is decoded level by level (a server's
JSON error quoted in a JSON body quoted in a transcript line is three)."""


def _decoded(text: str, escape: re.Pattern[str]) -> _Decoded | None:
    """`text` with one level of the JSON escapes `escape` matches decoded (None when it
    holds none)."""
    parts: list[str] = []
    view_at: list[int] = []
    source_at: list[int] = []
    escape_len: list[int] = []
    done = size = 0

    def segment(source: int, escape: int) -> None:
        view_at.append(size)
        source_at.append(source)
        escape_len.append(escape)

    for match in escape.finditer(text):
        if match.start() > done:
            segment(done, 0)
            parts.append(text[done : match.start()])
            size += match.start() - done
        high, low, single, letter = match.groups()
        if high is not None:  # a surrogate pair: one character past U+FFFF
            char = chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00))
        elif single is not None:
            char = chr(int(single, 16))
        else:
            char = _LETTERS.get(letter, letter)
        segment(match.start(), len(match[0]))
        parts.append(char)
        size += 1
        done = match.end()
    if not view_at:
        return None
    if done < len(text):
        segment(done, 0)
        parts.append(text[done:])
    return _Decoded("".join(parts), view_at, source_at, escape_len)


def _merged(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


@dataclass(frozen=True, slots=True)
class Redactor:
    """The secrets of one run (never printed: the repr shows only how many there are).

    What is redacted, and why (the module docstring has the whole rule): every run of at
    least `PARTIAL_MIN_CHARS` (8) consecutive characters of a secret that long (a partial
    echo gives most of a key away; a shorter run would match ordinary text); a secret of 6
    or 7 characters whole, anywhere; a shorter one whole as a word; each also in any
    JSON-escaped spelling (`\\uXXXX`, `\\/`) in text that was never parsed.

    Attributes:
        secrets: the exact strings to remove, longest first.
    """

    secrets: tuple[str, ...] = field(default=(), repr=False)
    _short: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _long: tuple[_Long, ...] = field(default=(), init=False, repr=False, compare=False)
    _whole: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    _escape: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted(set(self.secrets), key=lambda s: (-len(s), s)))
        object.__setattr__(self, "secrets", ordered)
        short = [s for s in ordered if len(s) < MIN_ANYWHERE_CHARS]
        if short:
            alternatives = "|".join(re.escape(s) for s in short)
            pattern = re.compile(f"(?<![{_WORD}])(?:{alternatives})(?![{_WORD}])")
            object.__setattr__(self, "_short", pattern)
        longs = tuple(_long(s) for s in ordered if len(s) >= PARTIAL_MIN_CHARS)
        object.__setattr__(self, "_long", longs)
        whole = tuple(s for s in ordered if MIN_ANYWHERE_CHARS <= len(s) < PARTIAL_MIN_CHARS)
        object.__setattr__(self, "_whole", whole)
        object.__setattr__(self, "_escape", _escape_pattern(ordered))

    def __repr__(self) -> str:
        return f"Redactor({len(self.secrets)} secrets)"

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def redact(self, text: str) -> str:
        """The text with every secret (and every run of 8 or more of a long secret's
        characters), plain or JSON-escaped, replaced by `[REDACTED]`."""
        spans = self._spans(text)
        if not spans:
            return text
        parts, done = [], 0
        for start, end in spans:
            parts += [text[done:start], REDACTED]
            done = end
        parts.append(text[done:])
        return "".join(parts)

    def found_in(self, text: str) -> bool:
        """True when a secret (or a run of one) occurs in text, plain or JSON-escaped: the
        test before parsing a JSON line (a short secret inside a word counts too, so it can
        be a false positive, never a false negative)."""
        if not self.secrets:
            return False
        short = [s for s in self.secrets if len(s) < MIN_ANYWHERE_CHARS]
        if short and any(s in view for view, _ in self._views(text) for s in short):
            return True  # inside a word too: after a `\\n` in JSON text, say
        return bool(self._spans(text))

    def _views(self, text: str) -> list[tuple[str, list[_Decoded]]]:
        """The text, then the text with one, two... levels of JSON escapes decoded, each
        with the decodings that lead back to the text (innermost first)."""
        views: list[tuple[str, list[_Decoded]]] = [(text, [])]
        while self._escape and len(views) <= MAX_ESCAPE_DEPTH and "\\" in views[-1][0]:
            view, chain = views[-1]
            if (decoded := _decoded(view, self._escape)) is None:
                break
            views.append((decoded.text, [decoded, *chain]))
        return views

    def _spans(self, text: str) -> list[Span]:
        """Where secrets stand in text, plain or JSON-escaped, merged and in order."""
        if not self.secrets:
            return []
        spans: list[Span] = []
        for view, chain in self._views(text):
            for found in self._plain_spans(view):
                for decoded in chain:
                    found = decoded.source_span(found)
                spans.append(found)
        return _merged(spans)

    def _plain_spans(self, text: str) -> list[Span]:
        spans: list[Span] = []
        for secret in self._long:
            if not any(block in text for block in secret.blocks):
                continue  # the common case: a few C-speed scans
            at = 0
            while (found := secret.pattern.search(text, at)) is not None:
                runs = [_run_at(text, found.start(), secret.secret, offset)
                        for offset in secret.offsets[found[0]]]  # fmt: skip
                start, end = max(runs, key=lambda r: r[1] - r[0])
                if end - start >= PARTIAL_MIN_CHARS:
                    spans.append((start, end))
                    at = end
                else:
                    at = found.start() + 1
        for secret_text in self._whole:
            at = text.find(secret_text)
            while at >= 0:
                spans.append((at, at + len(secret_text)))
                at = text.find(secret_text, at + len(secret_text))
        if self._short is not None:
            spans += [m.span() for m in self._short.finditer(text)]
        return spans

    def redact_json(self, value: T, *, keys: bool = True) -> T:
        """A JSON value (dicts, lists, strings, numbers) with secrets removed from every
        string in it; `keys=False` leaves dict keys alone (a document whose keys are
        servekit's schema). Returns the value itself when nothing changed."""
        if not self.secrets:
            return value
        return self._walk(value, keys)  # type: ignore[no-any-return]

    def _walk(self, value: Any, keys: bool) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            items = [
                (self.redact(k) if keys and isinstance(k, str) else k, self._walk(v, keys))
                for k, v in value.items()
            ]
            same = all(
                k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)
            )
            return value if same else dict(items)
        if isinstance(value, list | tuple):
            walked = [self._walk(v, keys) for v in value]
            if all(a is b for a, b in zip(walked, value, strict=True)):
                return value
            return type(value)(walked) if isinstance(value, tuple) else walked
        return value

    def redact_json_line(self, line: str) -> str:
        """One compact JSON object line of a schema (as records.jsonl is written) with secrets
        removed from its string values, its keys kept; the line itself when no secret occurs
        in it."""
        if not self.secrets or not self.found_in(line):
            return line
        clean = self._walk(json.loads(line), keys=False)
        return json.dumps(clean, separators=(",", ":"), ensure_ascii=False)

    def redact_document(self, doc: D) -> D:
        """A document model with secrets removed from its string values (its keys are its
        schema and stay); the document itself when nothing changed."""
        if not self.secrets:
            return doc
        data = doc.model_dump(mode="json", exclude_unset=True)
        clean = self._walk(data, keys=False)
        return doc if clean is data else type(doc).model_validate(clean)

    def scrub(self, exc: BaseException) -> BaseException:
        """The exception with secrets removed from its message (changed in place, so it can
        be re-raised as it is), and from the exceptions it was raised from or during (what a
        traceback prints); for a ServekitError also from its message and fix."""
        seen: set[int] = set()
        current: BaseException | None = exc
        while self.secrets and current is not None and id(current) not in seen:
            seen.add(id(current))
            for name in ("message", "fix"):
                text = getattr(current, name, None)
                if isinstance(text, str):
                    setattr(current, name, self.redact(text))
            current.args = tuple(self.redact(a) if isinstance(a, str) else a for a in current.args)
            current = current.__cause__ or current.__context__
        return exc

    def joined(self, other: Redactor) -> Redactor:
        """A redactor of this one's secrets and the other's."""
        return Redactor((*self.secrets, *other.secrets))


def redactor_of(secrets: Iterable[str | None]) -> Redactor:
    """A redactor of the given secrets, leaving out None and empty strings."""
    return Redactor(tuple(s for s in secrets if s))
