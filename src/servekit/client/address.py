"""A server's URL as the user gave it, checked and split into what servekit sends (core).

`server_address` turns `--url` (and validate's `--reference-url`) plus the API key into a
base URL without credentials, the headers that authenticate (a bearer token for the key,
HTTP basic auth for a URL's `user:password@`), and the `Redactor` of every secret involved.
Every command that takes a server URL goes through it, so they all accept the same URLs,
refuse the same mistakes with the same one-line messages, and no message ever quotes a
password: a refused URL is shown with its credentials removed.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from servekit.client.urls import SCHEMES, mask_credentials
from servekit.errors import UsageError
from servekit.redaction import Redactor, redactor_of

EXAMPLE = "http://127.0.0.1:8000"


@dataclass(frozen=True, slots=True)
class ServerAddress:
    """Where a server is and how to authenticate to it.

    Attributes:
        base_url: scheme, host, port and any path prefix; no credentials, no trailing `/`.
        headers: the Authorization header (bearer key or basic auth), or none.
        redactor: every secret of this address: the key, the password as given and
            decoded, and the basic-auth token.
    """

    base_url: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    redactor: Redactor = field(default_factory=Redactor, repr=False)


def server_address(
    url: str, *, api_key: str | None, flag: str = "--url", key_name: str = "OPENAI_API_KEY"
) -> ServerAddress:
    """Check a server URL and split off its credentials.

    Args:
        url: the URL as given, e.g. `http://127.0.0.1:8000` or `https://user:pw@host/prefix`.
        api_key: the API key, sent as `Authorization: Bearer KEY` (None or "": no key).
        flag: the option the URL came from, for messages.
        key_name: the environment variable the key came from, for messages.

    Raises:
        UsageError: the URL does not parse, is not http(s), has no host, ends in `/v1`
            (servekit adds `/v1` itself), or carries credentials while an API key is set
            (both would be the Authorization header). No message shows a password.
    """
    shown = mask_credentials(url)
    example = f"http://{shown.rpartition('@')[2]}" if "://" not in shown else EXAMPLE
    escape = "; percent-escape / ? # @ in a password (%2F %3F %23 %40)" if "@" in url else ""
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # parsed lazily: raises for a port that is not a number in range
    except ValueError:  # its text can quote part of the netloc, so it is not shown
        raise UsageError(
            f"{flag} {shown} is not a valid URL (its host or port does not parse)",
            fix=f"e.g. {flag} {example}{escape}",
        ) from None
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise UsageError(
            f"{flag} {shown} is not an http:// or https:// URL with a host",
            fix=f"e.g. {flag} {example}",
        )
    if "@" in parts.path + parts.query + parts.fragment:
        # an unescaped / ? or # in a password ends the netloc early: the rest of it would
        # become the path, and be printed and sent
        raise UsageError(
            f"{flag} {shown} has an @ after its host",
            fix="percent-escape / ? # @ in a user name or password (%2F %3F %23 %40)",
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = f"{host}:{port}" if port is not None else host
    path = parts.path.rstrip("/")
    base = urlunsplit((parts.scheme.lower(), netloc, path, "", ""))
    if parts.query or parts.fragment:
        raise UsageError(
            f"{flag} {base}?... has a query or fragment, which servekit cannot send with "
            "each request",
            fix=f"give the server's base URL only, e.g. {flag} {base}",
        )
    if path.lower().endswith("/v1"):
        raise UsageError(
            f"{flag} {shown} ends in /v1, which servekit adds itself",
            fix=f"drop /v1: {flag} {base[: -len('/v1')]}",
        )
    key = api_key or None
    raw_user, raw_password = _raw_credentials(parts.netloc)
    if raw_user is None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return ServerAddress(base, headers, redactor_of([key]))
    if key:
        raise UsageError(
            f"{flag} {shown} carries user:password@ credentials and ${key_name} holds an "
            "API key; servekit cannot send both as the Authorization header",
            fix=f"remove the credentials from {flag} or unset {key_name} "
            "(or name another variable with --api-key-env)",
        )
    user, password = unquote(raw_user), unquote(raw_password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    secrets = [password, raw_password, quote(password, safe=""), token, f"{user}:{password}"]
    return ServerAddress(base, {"Authorization": f"Basic {token}"}, redactor_of(secrets))


def _raw_credentials(netloc: str) -> tuple[str | None, str | None]:
    """The user and password of a netloc as written (still percent-encoded)."""
    userinfo, at, _ = netloc.rpartition("@")
    if not at:
        return None, None
    user, colon, password = userinfo.partition(":")
    return user, password if colon else None
