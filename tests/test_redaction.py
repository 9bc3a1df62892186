"""The Redactor: secrets out of text, JSON values, JSON lines, documents and errors."""

from __future__ import annotations

import json

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from servekit.errors import EndpointError
from servekit.redaction import REDACTED, Redactor, redactor_of
from servekit.results.validate import ValidateDocument

KEY = "sk-test-0123456789"


def test_a_secret_is_replaced_wherever_it_occurs() -> None:
    """A long secret goes inside words too; the longer of two overlapping secrets goes whole."""
    r = redactor_of([KEY, "sk-test"])
    assert (
        r.redact(f"Bearer {KEY}; x{KEY}y; sk-test")
        == f"Bearer {REDACTED}; x{REDACTED}y; {REDACTED}"
    )


def test_a_short_secret_is_replaced_only_as_a_whole_word() -> None:
    """A 2-letter password is removed where it stands alone, not inside 'pwd' or 'xpw'."""
    r = redactor_of(["pw"])
    assert r.redact("ops:pw pwd xpw (pw)") == f"ops:{REDACTED} pwd xpw ({REDACTED})"


def test_no_secrets_changes_nothing_and_empty_values_are_dropped() -> None:
    """An empty redactor (or one built from None and "") is falsy and returns its input."""
    r = redactor_of([None, ""])
    doc = {"a": [KEY]}
    assert not r
    assert r.redact(KEY) == KEY
    assert r.redact_json(doc) is doc


def test_repr_never_shows_a_secret() -> None:
    """The repr counts the secrets and shows none (a spec's repr must not leak)."""
    assert KEY not in repr(redactor_of([KEY]))
    assert "1 secrets" in repr(redactor_of([KEY]))


def test_json_values_are_redacted_in_keys_and_values_unless_keys_are_schema() -> None:
    """Strings anywhere in dicts, lists and tuples; dict keys only with keys=True."""
    r = redactor_of([KEY])
    doc = {KEY: [1, {"k": f"a {KEY}"}, (KEY,)], "n": 2.5}
    assert r.redact_json(doc) == {REDACTED: [1, {"k": f"a {REDACTED}"}, (REDACTED,)], "n": 2.5}
    assert list(r.redact_json(doc, keys=False)) == [KEY, "n"]


def test_a_json_line_stays_valid_json_whatever_the_secret_holds() -> None:
    """A secret with a quote, a backslash and non-ASCII is found in its escaped form and the
    line is rewritten as valid compact JSON."""
    secret = 'p"w\\é-123456'  # noqa: S105 - a test secret
    line = json.dumps({"error": f"bad {secret}", "n": [1, 2]}, separators=(",", ":"))
    clean = redactor_of([secret]).redact_json_line(line)
    assert json.loads(clean) == {"error": f"bad {REDACTED}", "n": [1, 2]}
    assert redactor_of([secret]).redact_json_line('{"a":1}') == '{"a":1}'


def test_a_document_keeps_its_schema_and_loses_the_secret() -> None:
    """A validate document with an echoed key in a check detail validates again, redacted."""
    doc = ValidateDocument.model_validate({
        "schema_version": 1, "passed": False, "target": {"url": "http://h", "model": KEY},
        "checks": [{"name": "chat", "status": "fail", "detail": f"echo {KEY}", "duration_s": 0.1}],
    })  # fmt: skip
    clean = redactor_of([KEY]).redact_document(doc)
    assert KEY not in json.dumps(clean.as_json())
    assert clean.checks[0].detail == f"echo {REDACTED}"
    assert redactor_of(["absent-secret"]).redact_document(doc) is doc


def test_an_error_is_scrubbed_in_place() -> None:
    """A ServekitError's message, fix and str lose the secret; it stays the same object."""
    exc = EndpointError(f"server said {KEY}", fix=f"not {KEY}")
    assert redactor_of([KEY]).scrub(exc) is exc
    assert KEY not in str(exc)
    assert KEY not in exc.message
    assert KEY not in (exc.fix or "")
    assert KEY not in str(redactor_of([KEY]).scrub(ValueError(f"v {KEY}")))


def test_a_traceback_chain_is_scrubbed() -> None:
    """The exceptions a traceback also prints (raised from, raised during) lose the secret."""
    inner = KeyError(f"inner {KEY}")
    context = ValueError(f"during {KEY}")
    outer = RuntimeError("outer")
    outer.__cause__, inner.__context__ = inner, context
    redactor_of([KEY]).scrub(outer)
    assert KEY not in str(inner)
    assert KEY not in str(context)


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(min_size=6, max_size=12),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
)
def test_no_secret_survives_in_text_or_a_json_line(secret: str, before: str, after: str) -> None:
    """Whatever the secret and its surroundings, it is gone from the text and from the
    decoded JSON line (plain or ASCII-escaped), and the line still parses."""
    assume(secret not in REDACTED)  # a secret inside the placeholder itself cannot vanish
    r = Redactor((secret,))
    text = before + secret + after
    assert secret not in r.redact(text)
    for ascii_only in (False, True):
        line = json.dumps({"t": text}, ensure_ascii=ascii_only)
        assert r.found_in(line)
        assert secret not in json.loads(r.redact_json_line(line))["t"]
