"""The Redactor: secrets out of text, JSON values, JSON lines, documents and errors."""

from __future__ import annotations

import json
import re

import pytest
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


CANARY = "sk-canary-KEY-4f7a9c2e"


def test_every_run_of_eight_characters_of_a_long_secret_is_replaced() -> None:
    """A server that echoes part of the key: any 8 or more of its consecutive characters
    go (its start, its middle), a run of 7 stays (it would match ordinary text)."""
    r = redactor_of([CANARY])
    assert r.redact(f"invalid key {CANARY[:20]}...") == f"invalid key {REDACTED}..."
    assert r.redact(f"({CANARY[5:13]})") == f"({REDACTED})"
    assert r.redact(f"{CANARY[:7]} and {CANARY[-7:]}") == f"{CANARY[:7]} and {CANARY[-7:]}"


def test_a_secret_of_six_or_seven_characters_goes_only_whole() -> None:
    """Below 8 characters the partial rule does not apply: the whole secret goes, anywhere."""
    r = redactor_of(["abc1234"])
    assert r.redact("xabc1234y abc123") == f"x{REDACTED}y abc123"


@pytest.mark.parametrize(
    "spelled",
    [
        CANARY.replace("-", "\\u002d"),
        "".join(f"\\u{ord(c):04X}" for c in CANARY),
        "pw-canary\\/PASS-91b2",
        "pw-canary\\\\\\/PASS-91b2",  # JSON put into JSON: the escape escaped again
        "pw\\\\u002dcanary\\/PASS-91b2",
        "key \\ud83d\\ude00-canary-KEY",  # a surrogate pair for a character past U+FFFF
    ],
)
def test_json_escaped_spellings_are_replaced(spelled: str) -> None:
    """A secret in text that was never parsed, written with JSON escapes (`\\uXXXX` of any
    character, `\\/`, at any depth): gone, and the text around it stays."""
    r = redactor_of([CANARY, "pw-canary/PASS-91b2", "key \U0001f600-canary-KEY"])
    assert r.redact(f'<html>said "{spelled}"</html>') == f'<html>said "{REDACTED}"</html>'
    line = json.dumps({"error": f"said {spelled}"}, separators=(",", ":"))
    assert r.found_in(line)
    assert json.loads(r.redact_json_line(line)) == {"error": f"said {REDACTED}"}


def _unescaped(text: str) -> str:
    """JSON's \\uXXXX and \\/ escapes decoded at any depth (the test's own decoder)."""
    for _ in range(5):
        decoded = re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), text)
        decoded = re.sub(r"\\+/", "/", decoded)
        if decoded == text:
            return text
        text = decoded
    return text


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(st.characters(codec="ascii", exclude_characters="\\"), min_size=8,
                   max_size=40),
    cut=st.tuples(st.integers(0, 40), st.integers(8, 40)),
    escape=st.lists(st.booleans(), min_size=40, max_size=40),
    depth=st.integers(1, 3),
    around=st.tuples(*[st.text(st.characters(exclude_characters="\\"), max_size=10)] * 2),
)  # fmt: skip
def test_no_run_of_a_secret_survives_escaped(
    secret: str, cut: tuple[int, int], escape: list[bool], depth: int, around: tuple[str, str]
) -> None:
    """Any run of 8 or more characters of a secret, with any of its characters JSON-escaped
    (`\\uXXXX`, `\\/`) at any depth up to 3, is gone from the text."""
    start = min(cut[0], len(secret) - 8)
    run = secret[start : start + cut[1]]
    assume(REDACTED not in secret and not any(run in a for a in around))
    spelled = "".join(
        ("\\/" if c == "/" else f"\\u{ord(c):04x}") if escape[i] else c for i, c in enumerate(run)
    )
    for _ in range(depth - 1):
        spelled = spelled.replace("\\", "\\\\")
    clean = Redactor((secret,)).redact(around[0] + spelled + around[1])
    assert run not in _unescaped(clean)
