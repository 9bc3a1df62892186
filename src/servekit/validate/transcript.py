"""Request/response transcripts of a validate run (shell): one JSON line per request,
appended as it ends, with the run's secrets (API key, URL password) redacted wherever they
appear in it."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import Any

from servekit import jsontext
from servekit.redaction import Redactor


class Transcript:
    """Append transcript lines to DIR/transcripts.jsonl (or keep nothing without a DIR)."""

    def __init__(self, out: Path | None, redactor: Redactor | None = None) -> None:
        self._redactor = redactor or Redactor()
        self._file = None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            self._file = (out / "transcripts.jsonl").open("a", encoding="utf-8")

    def add(self, check: str, path: str, request: Any, status: int | None, response: Any) -> None:
        """Record one exchange (headers are never recorded)."""
        if self._file is None:
            return
        exchange = {"check": check, "path": path, "request": request, "status": status,
                    "response": response}  # fmt: skip
        # default=str first, so what it turns into text is redacted too; what the server
        # said stays as received but always JSON: a NaN it sent is written null
        plain = jsontext.finite_or_null(
            json.loads(json.dumps(exchange, ensure_ascii=False, default=str))
        )
        line = jsontext.dumps(self._redactor.redact_json(plain), what="a transcript")
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> Transcript:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
