"""URL helpers (core): what kind of URL a text is, the path a `file:` URL names, and a URL
with its credentials removed or masked. The only URL parsing outside the client's own
requests (and `client/address.py`, which checks a server's URL)."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

SCHEMES = ("http", "https")
"""URL schemes `client.download.fetch_bytes` accepts."""


def is_http_url(text: str) -> bool:
    """Return True when text is an http:// or https:// URL."""
    try:
        return urlsplit(text).scheme.lower() in SCHEMES
    except ValueError:  # e.g. an unclosed IPv6 bracket: not a usable URL
        return False


def url_scheme(text: str) -> str:
    """The scheme of a URL, lowercased ("" for a plain path such as `fix.patch`).

    Raises:
        ValueError: the text is not a parseable URL (e.g. an unclosed IPv6 bracket).
    """
    return urlsplit(text).scheme


def file_url_path(text: str) -> str | None:
    """The local path a `file:` URL names, percent-decoded; None for anything else.

    Raises:
        ValueError: the text is not a parseable URL.
    """
    parts = urlsplit(text)
    return unquote(parts.path) if parts.scheme == "file" else None


def redact_url(url: str) -> str:
    """The URL without any user:password part, safe to write to files and logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def mask_credentials(text: str) -> str:
    """The URL as written with anything between `//` and the last `@` replaced by `***`,
    safe to print in an error about it: it never parses the text (which may not parse) and
    also hides a password holding an unescaped `/`."""
    scheme, sep, rest = text.strip().partition("//")
    if not sep:
        scheme, rest = "", text.strip()
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    return scheme + sep + rest


def has_credentials(text: str) -> bool:
    """True when a URL as written holds a `user[:password]@` part (or may: see
    `mask_credentials`)."""
    return mask_credentials(text) != text.strip()
