"""server_address: one check of a server URL for every command, credentials split off."""

from __future__ import annotations

import base64

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from servekit.client.address import server_address
from servekit.errors import UsageError


def test_a_plain_url_keeps_its_prefix_and_loses_the_trailing_slash() -> None:
    """No key, no credentials: the base URL, no headers, nothing to redact."""
    address = server_address("HTTP://Host:8000/gateway/", api_key=None)
    assert (address.base_url, address.headers, bool(address.redactor)) == (
        "http://host:8000/gateway",
        {},
        False,
    )


def test_an_api_key_is_a_bearer_header_and_a_secret() -> None:
    """The key goes into the Authorization header and the redactor, never the URL."""
    address = server_address("http://127.0.0.1:8000", api_key="sk-abcdef123")
    assert address.headers == {"Authorization": "Bearer sk-abcdef123"}
    assert address.redactor.redact("sk-abcdef123") == "[REDACTED]"
    assert "sk-abcdef123" not in repr(address)


def test_url_credentials_become_basic_auth_with_every_form_redacted() -> None:
    """user:password@ (percent-escaped) is sent as basic auth; the base URL has no
    credentials; the password as written, decoded, and the token are all secrets."""
    address = server_address("https://ops:p%40ss-word@[::1]:9443/x", api_key="")
    token = base64.b64encode(b"ops:p@ss-word").decode()
    assert address.base_url == "https://[::1]:9443/x"
    assert address.headers == {"Authorization": f"Basic {token}"}
    text = f"p%40ss-word p@ss-word {token}"
    assert address.redactor.redact(text) == "[REDACTED] [REDACTED] [REDACTED]"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:8000/v1", "ends in /v1, which servekit adds itself; drop /v1: "
         "--url http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "ends in /v1"),
        ("127.0.0.1:8000", "is not an http:// or https:// URL with a host; "
         "e.g. --url http://127.0.0.1:8000"),
        ("localhost:8000", "e.g. --url http://localhost:8000"),
        ("http://[::1", "is not a valid URL"),
        ("http://h:99999", "is not a valid URL"),
        ("http://h:8000?key=sk-secret-in-query", "has a query or fragment"),
    ],
)  # fmt: skip
def test_malformed_urls_are_one_line_usage_errors(url: str, message: str) -> None:
    """Each mistake is a usage error naming the fix; a query's value is never shown."""
    with pytest.raises(UsageError) as caught:
        server_address(url, api_key=None)
    assert message in str(caught.value)
    assert "sk-secret-in-query" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://ops:hunter2@[::1",
        "http://ops:hunter2@h:99999",
        "http://ops:hun/ter2@h:80",
        "http://ops:80/hunter2@127.0.0.1:8000",  # parses: host ops, port 80, path /hunter2@..
        "ftp://ops:hunter2@h",
        "ops:hunter2@h:8000",
        "http://ops:hunter2@h/v1",
    ],
)
def test_no_refusal_shows_the_password(url: str) -> None:
    """Whatever is wrong with a URL holding a password, the message masks the credentials."""
    with pytest.raises(UsageError) as caught:
        server_address(url, api_key=None, flag="--reference-url")
    assert "hunter2" not in str(caught.value)
    assert "hun/" not in str(caught.value)
    assert str(caught.value).startswith("--reference-url ")


def test_credentials_and_an_api_key_together_are_refused() -> None:
    """Both would be the Authorization header: refused, naming the variable, not the values."""
    with pytest.raises(UsageError) as caught:
        server_address("http://ops:hunter2@h:1", api_key="sk-abcdef123", key_name="MY_KEY")
    text = str(caught.value)
    assert "hunter2" not in text
    assert "sk-abcdef123" not in text
    assert "$MY_KEY holds an API key" in text
    assert "unset MY_KEY" in text


@settings(max_examples=200, deadline=None)
@given(
    scheme=st.sampled_from(["http://", "https://", "ftp://", "", "http:/"]),
    password=st.text(st.characters(codec="ascii", exclude_characters="@\x00"), min_size=6,
                     max_size=16),
    host=st.sampled_from(["127.0.0.1", "[::1]", "[::1", "h:99999", "h:8000/v1", "h:1/x", ""]),
)  # fmt: skip
def test_no_url_ever_shows_its_password(scheme: str, password: str, host: str) -> None:
    """Whatever the URL around it, a password is neither in the base URL servekit uses nor in
    the message refusing the URL."""
    assume(password.strip() == password and password not in f"{scheme}ops{host}")
    assert password not in _base_url_or_refusal(f"{scheme}ops:{password}@{host}")


def test_a_password_with_two_slashes_in_a_url_without_scheme_is_hidden() -> None:
    """Hypothesis found it: `ops:0000//@127.0.0.1` was masked from its `//`, so the message
    showed `ops:0000//***@127.0.0.1`."""
    text = _base_url_or_refusal("ops:0000//@127.0.0.1")
    assert "0000" not in text
    assert "***@127.0.0.1" in text


def _base_url_or_refusal(url: str) -> str:
    """The base URL servekit would use, or the message refusing the URL."""
    try:
        return server_address(url, api_key=None).base_url
    except UsageError as exc:
        return str(exc)
