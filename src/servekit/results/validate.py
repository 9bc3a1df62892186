"""`servekit validate --json` and validate.json as one typed model (core), and its loader."""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue, ValidationError

from servekit.results._base import Document, DocumentError, first_error, refuse_newer

VALIDATE_VERSION: Literal[1] = 1
Status = Literal["pass", "fail", "warn", "skip"]


class CheckBlock(Document):
    """One check's result; `data` holds the check's own figures when it has any."""

    name: str
    status: Status
    detail: str
    duration_s: float
    data: dict[str, JsonValue] | None = None


class ValidateTarget(Document):
    """The endpoint that was validated (credentials removed)."""

    url: str
    model: str | None


class ValidateDocument(Document):
    """validate.json: passed when no check failed (docs/schemas/README.md)."""

    schema_version: Literal[1]
    passed: bool
    target: ValidateTarget | None = None
    checks: list[CheckBlock]

    def failed(self) -> list[str]:
        """The names of the checks that failed."""
        return [c.name for c in self.checks if c.status == "fail"]


def load_validate(doc: object, *, where: str = "validate.json") -> ValidateDocument:
    """Validate a parsed validate.json (one without schema_version reads as version 1).

    Raises:
        DocumentError: a newer or unknown schema_version, or an invalid document.
    """
    if isinstance(doc, dict) and "schema_version" not in doc:
        doc = {"schema_version": VALIDATE_VERSION, **doc}
    refuse_newer(doc, kind="validate", current=VALIDATE_VERSION, where=where)
    try:
        return ValidateDocument.model_validate(doc)
    except ValidationError as exc:
        raise DocumentError(
            f"{where} is not a servekit validate.json: {first_error(exc)}",
            fix="pass the validate.json written by servekit validate --out",
        ) from None
