"""Reading validate.json back (servekit report): current, without schema_version, future."""

from __future__ import annotations

import pytest

from servekit.results import DocumentError
from servekit.results.validate import load_validate

CHECK = {"name": "chat", "status": "pass", "detail": "ok", "duration_s": 0.1}


def test_a_validate_json_with_and_without_schema_version_reads() -> None:
    """Version 1 and a file written before schema_version existed both read."""
    old = load_validate({"passed": True, "checks": [CHECK]})
    new = load_validate({"schema_version": 1, "passed": True, "checks": [CHECK]})
    assert old == new
    assert old.checks[0].status == "pass"
    assert old.failed() == []


def test_a_future_or_invalid_validate_json_is_one_clear_error() -> None:
    """A newer schema_version names it and the fix; an unknown status names the field."""
    with pytest.raises(DocumentError, match=r"validate schema_version 2, newer .*upgrade servekit"):
        load_validate({"schema_version": 2, "passed": True, "checks": []}, where="v.json")
    with pytest.raises(DocumentError, match=r"v.json is not a servekit validate.json: checks.0"):
        load_validate({"passed": True, "checks": [{**CHECK, "status": "meh"}]}, where="v.json")
