"""The base of every servekit document model (core): frozen, strict about keys, JSON out."""

from __future__ import annotations

import math
from typing import Annotated, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
)

from servekit.errors import ServekitError


class Document(BaseModel):
    """A frozen model of (part of) a JSON document; unknown keys are errors.

    Keys that are optional in the document (absent, not null) are fields with a default that
    the builder leaves unset: `as_json` writes the fields that were set, so a document read
    back and written again is the same JSON, and a built one has exactly its keys.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())
    # What a document of the previous format (no schema_version) that lacks this block reads as.
    v0_blank: ClassVar[dict[str, JsonValue]] = {}

    def as_json(self) -> dict[str, JsonValue]:
        """The document as JSON values, keys in field order, unset optional keys left out."""
        return self.model_dump(mode="json", exclude_unset=True)


def _rate_json(value: float) -> float | str:
    return "inf" if math.isinf(value) else value


# A positive rate where infinity means "no pacing" (`--rate inf`). JSON has no infinity, so
# the document writes the string "inf"; reading accepts it back (pydantic reads "inf" as a
# float). NaN and anything not positive are refused.
RateOrInf = Annotated[
    float,
    Field(gt=0, allow_inf_nan=True),
    PlainSerializer(_rate_json, return_type=float | str, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"const": "inf"}],
            "description": 'requests per second; "inf": every request sent at once',
        }
    ),
]


def first_error(exc: ValidationError) -> str:
    """The first validation problem in one line: where in the document, and what."""
    err = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in err["loc"]) or "the document"
    # Keys come from the file: escape control characters, keep the line short.
    where = where.encode("unicode_escape").decode("ascii")
    where = where if len(where) <= 80 else where[:77] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {err['msg']}{more}"


class DocumentError(ServekitError):
    """A document read back (summary.json, validate.json) is not one servekit can read."""


def refuse_newer(doc: object, *, kind: str, current: int, where: str) -> None:
    """Refuse a document whose integer `schema_version` is newer than `current` (a file a
    later servekit wrote); an older, missing or malformed one is left to validation.

    Raises:
        DocumentError: the version is newer than this servekit reads.
    """
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > current:
        raise DocumentError(
            f"{where} has {kind} schema_version {version}, newer than this servekit reads "
            f"({current})",
            fix="upgrade servekit (pip install -U servekit) to read it",
        )
