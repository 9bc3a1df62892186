"""The secrets of one run and their removal from text, documents and errors (core).

A `Redactor` is built once at the CLI edge from what servekit was given to authenticate
with (the API key, a URL's password and the basic-auth token made of it) and applied at
every output sink: the files a run writes (records, summary, validate.json, transcripts),
what the CLI prints and the error it reports. It redacts what came from anywhere: a server
that echoes the key back, an engine log that prints it, an error that quotes a request.

Each secret is replaced by `[REDACTED]` wherever it occurs, except a secret shorter than
`MIN_ANYWHERE_CHARS`: replacing two letters everywhere would wreck every output, so a short
secret is replaced only where it stands as a whole word (not inside a longer run of letters
and digits). Keys of a document whose schema servekit defines are never rewritten.
"""

from __future__ import annotations

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

_WORD = "A-Za-z0-9"
D = TypeVar("D", bound="BaseModel")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Redactor:
    """The secrets of one run (never printed: the repr shows only how many there are).

    Attributes:
        secrets: the exact strings to remove, longest first (so a secret that contains
            another is removed whole).
    """

    secrets: tuple[str, ...] = field(default=(), repr=False)
    _short: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _encoded: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted(set(self.secrets), key=lambda s: (-len(s), s)))
        object.__setattr__(self, "secrets", ordered)
        short = [s for s in ordered if len(s) < MIN_ANYWHERE_CHARS]
        if short:
            alternatives = "|".join(re.escape(s) for s in short)
            pattern = re.compile(f"(?<![{_WORD}])(?:{alternatives})(?![{_WORD}])")
            object.__setattr__(self, "_short", pattern)
        # How each secret looks inside JSON text (escaped quotes, backslashes, \uXXXX), so a
        # JSON line can be checked without parsing it.
        encoded = {json.dumps(s, ensure_ascii=a)[1:-1] for s in ordered for a in (False, True)}
        object.__setattr__(self, "_encoded", tuple(encoded))

    def __repr__(self) -> str:
        return f"Redactor({len(self.secrets)} secrets)"

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def redact(self, text: str) -> str:
        """The text with every secret replaced by `[REDACTED]`."""
        for secret in self.secrets:
            if len(secret) >= MIN_ANYWHERE_CHARS and secret in text:
                text = text.replace(secret, REDACTED)
        if self._short is not None and self._short.search(text):
            text = self._short.sub(REDACTED, text)
        return text

    def found_in(self, text: str) -> bool:
        """True when a secret may occur in text, plain or JSON-escaped (a cheap test before
        parsing a JSON line; a short secret inside a word counts too, so it can be a false
        positive, never a false negative)."""
        return any(form in text for form in self._encoded)

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
