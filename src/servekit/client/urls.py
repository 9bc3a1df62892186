"""URL helpers (core): what kind of URL a text is, the path a `file:` URL names, and a URL
with its credentials removed or masked. The only URL parsing outside the client's own
requests (and `client/address.py`, which checks a server's URL)."""

from __future__ import annotations

import re
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


_URL_START = re.compile(r"\s*(?:[A-Za-z][A-Za-z0-9+.-]*:)?//")
"""`scheme://` (any scheme), or `//` (a URL without its scheme)."""


def mask_credentials(text: str) -> str:
    """The URL as written with anything between `scheme://` and the last `@` replaced by
    `***` (all before the last `@` when it starts with no `scheme://`), safe to print in an
    error about it: it never parses the text (which may not parse) and also hides a
    password holding an unescaped `/`, even `//` in a URL given without its scheme."""
    stripped = text.strip()
    start = _URL_START.match(stripped)
    end = start.end() if start else 0
    head, rest = stripped[:end], stripped[end:]
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    return head + rest


def has_credentials(text: str) -> bool:
    """True when a URL as written holds a `user[:password]@` part, read the way a lenient
    client reads it: an `@` in its authority, or an `@` further on (before any `?` or `#`)
    with a `:` between `scheme://` and it. urllib ends the authority at the first `/`, so
    it reads `https://ops:pw/secret@host/x.diff` as host `ops` and port `pw`; curl sends
    user `ops` with password `pw/secret` to `host`. Text that is no `scheme://` or `//` URL
    (a local path) has none."""
    start = _URL_START.match(text)
    if start is None:
        return False
    rest = text[start.end() :]
    head = re.split(r"[?#]", rest, maxsplit=1)[0]
    authority = head.split("/", 1)[0]
    at = head.rfind("@")
    return "@" in authority or (at >= 0 and ":" in head[:at])
